#!/usr/bin/env bash
# Builds the test suite with GCC, AddressSanitizer (with LeakSanitizer) and
# UndefinedBehaviorSanitizer into ${SAN_BUILD_DIR:-build-asan}, CPU only, and runs it.
# Any sanitizer report fails the test that triggered it.
#   scripts/sanitize.sh                 # unit + integration + e2e (not gpu)
#   scripts/sanitize.sh -R Gloo         # extra arguments go to ctest
#   BUILD_ONLY=1 scripts/sanitize.sh    # build, do not run
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null
ROOT="$(pwd)"
BUILD=${SAN_BUILD_DIR:-build-asan}
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=true CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}

# -O1: the usual sanitizer trade-off, readable stacks at a fraction of -O0's run time.
# UBSan does not recover, so undefined behaviour aborts the test like an ASan report.
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# CUDA off: its kernels cannot run here, and nvcc host code under ASan only costs build
# time. Benchmarks stay on: tests/benchmarks tests the load generator and roofline tool.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=gcc-12 -DCMAKE_CXX_COMPILER=g++-12 \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" \
  -DCMAKE_EXE_LINKER_FLAGS="$SAN" -DCMAKE_SHARED_LINKER_FLAGS="$SAN" \
  -DTESSERA_ENABLE_CUDA=OFF -DTESSERA_BUILD_TESTS=ON >/dev/null
ninja -C "$BUILD" -j "${JOBS:-$(nproc)}" ${TARGETS:-}
[ -z "${BUILD_ONLY:-}" ] || exit 0

# Every process the tests start (coordinators, workers, the CLI) inherits these.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:print_stacktrace=1:detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1:${ASAN_OPTIONS_EXTRA:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:report_error_type=1"
export LSAN_OPTIONS="suppressions=$ROOT/scripts/lsan.supp:print_suppressions=0"

# Servers started by the e2e tests write their reports to their own logs, and a leak
# found at a server's exit changes only an exit status that no test reads: so the logs
# written during this run are searched too.
SCRATCH="${TMPDIR:-/tmp}/tessera-tests"
mkdir -p "$SCRATCH"
MARKER=$(mktemp "$SCRATCH/.sanitize-start.XXXXXX")
trap 'rm -f "$MARKER"' EXIT
status=0
# Nothing is excluded but the gpu label: under ASan the whole suite, e2e included (chaos,
# real-shape and memory tests too), took 448-505 s at -j2 on a 2-core VM (2026-12-03).
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" --timeout 900 \
  -LE gpu "$@" || status=$?
reports=$(find "$SCRATCH" -type f -newer "$MARKER" -exec \
  grep -l -E "ERROR: (Address|Leak)Sanitizer|runtime error: |SUMMARY: UndefinedBehaviorSanitizer" {} + || true)
if [ -n "$reports" ]; then
  echo "sanitize.sh: sanitizer reports in the logs of processes started by the tests:" >&2
  for f in $reports; do
    echo "=== $f" >&2
    grep -m1 -A30 -E "ERROR: (Address|Leak)Sanitizer|runtime error: " "$f" >&2 || true
  done
  status=1
fi
exit "$status"
