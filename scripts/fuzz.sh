#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang, ASan and UBSan into ${FUZZ_BUILD_DIR:-build-fuzz}
# and runs each for SECONDS (default 60) from its seed corpus (fuzz/corpus/<name>, kept
# between runs in ${FUZZ_BUILD_DIR}/corpus/<name>). Exits non-zero on the first crash,
# leak, sanitizer report or timeout, leaving the reproducer in ${FUZZ_BUILD_DIR}/crashes.
#   scripts/fuzz.sh [SECONDS] [FUZZER ...]
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null  # clang and libFuzzer
SECONDS_EACH=${1:-60}
shift || true
FUZZERS=("$@")
[ ${#FUZZERS[@]} -gt 0 ] || FUZZERS=(safetensors_fuzzer model_config_fuzzer gguf_fuzzer tokenizer_fuzzer
  chat_template_fuzzer openai_request_fuzzer generate_request_fuzzer constraint_fuzzer)
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
export CCACHE_BASEDIR="$(pwd)" CCACHE_NOHASHDIR=true
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN -fsanitize=fuzzer-no-link" \
  -DTESSERA_BUILD_FUZZERS=ON -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCHMARKS=OFF \
  -DTESSERA_ENABLE_CUDA=OFF >/dev/null
ninja -C "$BUILD" -j "${JOBS:-$(nproc)}" "${FUZZERS[@]}"
export TESSERA_FUZZ_MODEL_DIR=${TESSERA_FUZZ_MODEL_DIR:-$(cd ../shared/models/stories260K 2>/dev/null && pwd || echo ../shared/models/stories260K)}
mkdir -p "$BUILD/crashes"
for f in "${FUZZERS[@]}"; do
  corpus="$BUILD/corpus/$f"
  mkdir -p "$corpus"
  [ -d "fuzz/corpus/$f" ] && cp -n fuzz/corpus/"$f"/* "$corpus"/ 2>/dev/null || true
  echo "fuzz.sh: $f for ${SECONDS_EACH}s"
  "$BUILD/fuzz/$f" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix="$BUILD/crashes/$f-" -print_final_stats=1 "$corpus" 2>"$BUILD/$f.log" || {
    tail -40 "$BUILD/$f.log" >&2
    # The reproducers also go into the log as base64, for a CI run whose folder is gone.
    for a in "$BUILD/crashes/$f-"*; do
      [ -f "$a" ] || continue
      echo "fuzz.sh: reproducer $a ($(stat -c %s "$a") bytes), base64:" >&2
      head -c 65536 "$a" | base64 >&2
    done
    echo "fuzz.sh: $f FAILED (reproducer in $BUILD/crashes/; rerun: $BUILD/fuzz/$f FILE)" >&2
    exit 1
  }
  grep -E "^stat::number_of_executed_units|^Done" "$BUILD/$f.log" | tr '\n' ' '
  echo
done
echo "fuzz.sh: all fuzzers ran ${SECONDS_EACH}s each with no crash"
