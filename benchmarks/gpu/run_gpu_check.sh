#!/usr/bin/env bash
# One-command GPU check: configures and builds the CUDA backend, the gpu tests and gpu_bench
# (Release, one architecture, only those targets), runs `ctest -L gpu`, then gpu_bench,
# writing benchmarks/results/gpu_check-<date>.json and printing its table and a summary;
# then, where `tessera` and `tessera-bench` exist (prebuilt and full modes), the serving
# benchmark (benchmarks/gpu/serve_bench.sh: `tessera serve --device cuda` on a generated
# Llama-3.1-8B-shaped checkpoint, benchmarks/results/gpu_serving-<date>.{json,md}).
# Installs nothing system-wide and downloads nothing. benchmarks/gpu/README.md says how to
# run it on the lent GPU machine.
#
# Two ways to build, chosen by GPU_CHECK_MODE (default auto):
#   full      every Debian 12 dev package is installed (scripts/setup.sh): the gpu tests include
#             `tessera run --device cuda` (cli_run_cuda_test) and a coordinator with a CUDA
#             worker (serving_cuda_test).
#   gpu-only  a machine with nvcc, CMake and ninja but no -dev packages (the lent H200):
#             unpacks the .deb files benchmarks/gpu/fetch_deps.sh put in DEPS_DIR into
#             DEPS_PREFIX and builds with -DTESSERA_GPU_CHECK_ONLY=ON: both kernel backends,
#             the CUDA forward pass and their tests, no gRPC, protobuf, prometheus-cpp or Gloo
#             (so no cli_run_cuda_test or serving_cuda_test).
#   prebuilt  the binaries benchmarks/gpu/pack_prebuilt.sh built on Debian 12 and packed into
#             PREBUILT_DIR with the libraries they load: no build at all, so the device's
#             minutes go to the tests and gpu_bench, and the full mode's tests come along.
#   auto      full where gRPC's and Gloo's CMake files are installed, else prebuilt where
#             PREBUILT_DIR holds a pack, else gpu-only when DEPS_DIR holds .deb files, else
#             full (which then says what is missing).
#
# Environment:
#   GPU_CHECK_MODE     auto, full, prebuilt or gpu-only
#   PREBUILT_DIR       pack_prebuilt.sh's folder (default .gpu-prebuilt)
#   PREBUILT_PREFIX    where prebuilt mode unpacks it (default /tmp/tessera-prebuilt)
#   DEPS_DIR           fetch_deps.sh's folder: .deb files and stories260K (default .gpu-deps)
#   DEPS_PREFIX        where gpu-only unpacks the .deb files (default /tmp/tessera-deps)
#   TIME_BUDGET        seconds for the whole script; each step's timeout is cut to fit
#                      (default 470 prebuilt: tests and gpu_bench took 25-60 s on the H200,
#                      the serving benchmark takes up to 300 s more, and one device call
#                      must stay under 8 minutes; 450 gpu-only, 1200 full)
#   BUILD_DIR          build folder (default build-gpu-check)
#   CUDA_ARCH          CMAKE_CUDA_ARCHITECTURES (default 90a: H100/H200)
#   JOBS               parallel compile jobs (default: all cores)
#   CTEST_JOBS         tests run at once (default 4 prebuilt and gpu-only, 1 full)
#   TESSERA_CMAKE_ARGS extra CMake arguments, e.g. -DCMAKE_PREFIX_PATH=/opt/deps
#   GPU_BENCH_ARGS     extra gpu_bench arguments, e.g. "--layers 8 --batches 1,64"
#                      (gpu_bench runs with BF16 activations, the worker's default, and
#                      times decode with FP32 ones too; "--activations f32" swaps them)
#   OUT_JSON           where the JSON goes (default benchmarks/results/gpu_check-<date>.json)
#   GPU_CHECK_SERVE    0 skips the serving benchmark (default 1)
#   SERVE_BENCH_BUDGET seconds for the serving benchmark (default 300, cut to what is left);
#                      its other SERVE_BENCH_* settings pass through (serve_bench.sh --help).
#                      Its checkpoint is written in the background while the tests run.
#   OUT                when set (the device tool sets it), the JSON, the logs and the summary
#                      are copied there as well
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build-gpu-check}
CUDA_ARCH=${CUDA_ARCH:-90a}
JOBS=${JOBS:-$(nproc)}
DEPS_DIR=${DEPS_DIR:-.gpu-deps}
DEPS_PREFIX=${DEPS_PREFIX:-/tmp/tessera-deps}
PREBUILT_DIR=${PREBUILT_DIR:-.gpu-prebuilt}
PREBUILT_PREFIX=${PREBUILT_PREFIX:-/tmp/tessera-prebuilt}
MODE=${GPU_CHECK_MODE:-auto}
MULTIARCH=x86_64-linux-gnu  # the .deb files fetch_deps.sh downloads are amd64
STAMP=$(date -u +%Y%m%d-%H%M%S)
OUT_JSON=${OUT_JSON:-benchmarks/results/gpu_check-${STAMP}.json}
start=$(date +%s)

say() { printf '[gpu-check %4ss] %s\n' "$(($(date +%s) - start))" "$*"; }
die() { printf 'gpu-check: %s\n' "$*" >&2; copy_to_out; exit "${2:-1}"; }
# Seconds left of TIME_BUDGET, and a step's timeout: at most $1, at most what is left.
remaining() { echo $((TIME_BUDGET - ($(date +%s) - start))); }
step_limit() {
  local left
  left=$(remaining)
  if [ "$left" -lt "$1" ]; then echo $((left > 1 ? left : 1)); else echo "$1"; fi
}
# Whatever exists of the results and logs goes to $OUT, which the device tool brings back.
copy_to_out() {
  [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] || return 0
  local f
  for f in "$OUT_JSON" "$BUILD_DIR/configure.log" "$BUILD_DIR/build.log" "$BUILD_DIR/ctest.log" \
           "$BUILD_DIR/gpu_bench.log" "$BUILD_DIR/serve_gen.log" "$BUILD_DIR/serve_bench.log" \
           "$BUILD_DIR/summary.txt"; do
    [ -f "$f" ] && cp "$f" "$OUT/"
  done
}

have_full_deps() {
  local grpc gloo d
  for d in /usr/lib/$MULTIARCH/cmake /usr/lib/cmake /usr/lib64/cmake /usr/local/lib/cmake \
           /usr/share/cmake /usr/local/share/cmake; do
    [ -f "$d/grpc/gRPCConfig.cmake" ] && grpc=1
    [ -f "$d/Gloo/GlooConfig.cmake" ] && gloo=1
  done
  [ -n "${grpc:-}" ] && [ -n "${gloo:-}" ]
}

# dpkg-deb where it exists; otherwise the .deb's data archive through ar and tar.
unpack_deb() {
  local deb=$1 member tmp
  if command -v dpkg-deb >/dev/null 2>&1; then
    dpkg-deb -x "$deb" "$DEPS_PREFIX"
    return
  fi
  member=$(ar t "$deb" | grep '^data\.tar') || return 1
  tmp=$(mktemp)
  ar p "$deb" "$member" >"$tmp" && tar -xf "$tmp" -C "$DEPS_PREFIX"
  local rc=$?
  rm -f "$tmp"
  return $rc
}

# Unpacks pack_prebuilt.sh's archive and makes the paths compiled into its tests (the source
# and build folders on the machine that built them) lead here. Sets BUILD_DIR.
setup_prebuilt() {
  local manifest=$PREBUILT_DIR/manifest.txt src build missing soname dir found
  src=$(sed -n 's/^source_dir=//p' "$manifest")
  build=$(sed -n 's/^build_dir=//p' "$manifest")
  [ -n "$src" ] && [ -n "$build" ] || die "$manifest names no source_dir or build_dir" 3
  say "mode prebuilt: $(grep -E '^(commit|cuda_arch|built)=' "$manifest" | paste -sd' ')"
  rm -rf "$PREBUILT_PREFIX" && mkdir -p "$PREBUILT_PREFIX" || die "cannot create $PREBUILT_PREFIX" 3
  # tar's -J needs the xz program; Python's tarfile reads xz without it.
  if command -v xz >/dev/null 2>&1; then
    tar -C "$PREBUILT_PREFIX" -xJf "$PREBUILT_DIR/prebuilt.tar.xz"
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$PREBUILT_DIR/prebuilt.tar.xz" "$PREBUILT_PREFIX"
  fi || die "could not unpack $PREBUILT_DIR/prebuilt.tar.xz" 3
  if [ "$(readlink -f "$src" 2>/dev/null)" != "$ROOT" ]; then
    [ -e "$src" ] && die "$src exists on this machine and is not this checkout, but the prebuilt tests look for the sources there; pack again from a checkout at a path this machine lacks" 3
    mkdir -p "$(dirname "$src")" && ln -s "$ROOT" "$src" || die "cannot link $src to $ROOT" 3
    say "linked $src -> $ROOT (the source path compiled into the tests)"
  fi
  [ -L "$build" ] && rm -f "$build"
  [ -e "$build" ] && die "$build exists and is not the prebuilt build; move it away" 3
  ln -s "$PREBUILT_PREFIX/build" "$build" || die "cannot link $build" 3
  BUILD_DIR=$build
  export LD_LIBRARY_PATH=$PREBUILT_PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # cuBLAS, cuBLASLt and NCCL come from the machine: the toolkit's folders or the pip wheels'
  # (nvidia/*/lib), wherever the loader does not already find them.
  missing=$(find "$PREBUILT_PREFIX/build" -type f -perm -u+x -exec ldd {} + 2>/dev/null |
            awk '$3 == "not" {print $1}' | sort -u)
  for soname in $missing; do
    found=$(find /usr/local /usr/lib /usr/lib64 /opt -name "$soname" \( -type f -o -type l \) \
              2>/dev/null | head -1)
    if [ -n "$found" ]; then
      dir=$(dirname "$found")
      export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$dir
      say "$soname from $dir"
    fi
  done
  missing=$(find "$PREBUILT_PREFIX/build" -type f -perm -u+x -exec ldd {} + 2>/dev/null |
            awk '$3 == "not" {print $1}' | sort -u | paste -sd' ')
  [ -z "$missing" ] || die "libraries not found on this machine: $missing" 3
  if [ -z "${TESSERA_STORIES_DIR:-}" ] && [ -f "$PREBUILT_PREFIX/stories260K/model.safetensors" ]; then
    export TESSERA_STORIES_DIR=$PREBUILT_PREFIX/stories260K
    say "stories260K from $TESSERA_STORIES_DIR"
  fi
  # For a later command in the same call: `. $PREBUILT_PREFIX/env.sh`, then a test binary or
  # `ctest --test-dir $build -R NAME -V` runs as it did here.
  {
    echo "export LD_LIBRARY_PATH='$LD_LIBRARY_PATH'"
    [ -n "${TESSERA_STORIES_DIR:-}" ] && echo "export TESSERA_STORIES_DIR='$TESSERA_STORIES_DIR'"
  } >"$PREBUILT_PREFIX/env.sh"
}

# ---- Which build.
debs=("$DEPS_DIR"/*.deb)
[ -e "${debs[0]}" ] || debs=()
if [ "$MODE" = auto ]; then
  if have_full_deps; then MODE=full
  elif [ -f "$PREBUILT_DIR/prebuilt.tar.xz" ]; then MODE=prebuilt
  elif [ ${#debs[@]} -gt 0 ]; then MODE=gpu-only
  else MODE=full
  fi
fi
# Step limits (build, tests, benchmark): full mode keeps the ones it always had; gpu-only
# mode fits the lent machine's 10-minute command limit with room for its start.
case "$MODE" in
  full) TIME_BUDGET=${TIME_BUDGET:-1200}; CTEST_JOBS=${CTEST_JOBS:-1}; limits=(600 240 300) ;;
  prebuilt) TIME_BUDGET=${TIME_BUDGET:-470}; CTEST_JOBS=${CTEST_JOBS:-4}; limits=(0 240 200) ;;
  gpu-only) TIME_BUDGET=${TIME_BUDGET:-450}; CTEST_JOBS=${CTEST_JOBS:-4}; limits=(360 180 240) ;;
  *) die "GPU_CHECK_MODE must be auto, full, prebuilt or gpu-only, not '$MODE'" 2 ;;
esac

# ---- Tools. nvcc is often installed but not on PATH.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
# A prebuilt pack needs only ctest (part of CMake); the other modes build.
missing=()
tools=(cmake)
[ "$MODE" = prebuilt ] || tools+=(ninja nvcc)
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
CXX_BIN=${CXX:-$(command -v c++ || command -v g++ || true)}
[ -n "$CXX_BIN" ] || [ "$MODE" = prebuilt ] || missing+=("a C++20 compiler (c++ or g++)")
if [ ${#missing[@]} -gt 0 ]; then
  die "missing tools: ${missing[*]}. Install them (Debian: cmake ninja-build g++; CUDA toolkit for nvcc) and rerun; this script installs nothing." 2
fi
cmake_version=$(cmake --version | head -1 | awk '{print $3}')
if [ "$(printf '%s\n3.25\n' "$cmake_version" | sort -V | head -1)" != "3.25" ]; then
  die "cmake $cmake_version is too old; the project needs 3.25 or newer" 2
fi
if [ "$MODE" = prebuilt ]; then
  say "cmake $cmake_version$(command -v nvcc >/dev/null 2>&1 && echo ", $(nvcc --version | tail -1)")"
else
  say "cmake $cmake_version, ninja $(ninja --version), $(nvcc --version | tail -1), $("$CXX_BIN" --version | head -1)"
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
else
  say "nvidia-smi not found; the tests will report whether a device is usable"
fi
command -v ccache >/dev/null 2>&1 && say "ccache found: compiles are cached"

if [ "$MODE" = prebuilt ]; then
  setup_prebuilt
  rm -f "$BUILD_DIR"/{configure,build,ctest,gpu_bench,serve_bench,serve_gen}.log "$BUILD_DIR/summary.txt"
else
  mkdir -p "$BUILD_DIR"
  rm -f "$BUILD_DIR"/{configure,build,ctest,gpu_bench,serve_bench,serve_gen}.log "$BUILD_DIR/summary.txt"
  cmake_args=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH"
              -DTESSERA_ENABLE_CUDA=ON -DTESSERA_BUILD_TESTS=ON -DTESSERA_BUILD_BENCHMARKS=ON)
  if [ "$MODE" = full ]; then
    # The gpu-labelled tests: kernels against the CPU, stories260K through the worker's forward
    # pass (cuda_forward_test), GPTQ/AWQ checkpoints through it (cuda_int4_forward_test, needs
    # numpy), the tensor-parallel forward over NCCL as the worker queues it
    # (cuda_tensor_parallel_forward_test: tp 1 here, tp 2 where two devices exist),
    # `tessera run --device cuda` (cli_run_cuda_test) and a coordinator with a CUDA worker
    # (serving_cuda_test, which builds both binaries).
    TARGETS=(tessera_kernels_cuda kernels_cuda_test cuda_forward_test cuda_int4_forward_test
             cuda_tensor_parallel_forward_test tessera cli_run_cuda_test serving_cuda_test
             gpu_bench)
    # The serving benchmark's programs.
    [ "${GPU_CHECK_SERVE:-1}" = 0 ] || TARGETS+=(tessera-bench tessera-coordinator tessera-worker)
    cmake_args+=(-DTESSERA_GPU_CHECK_ONLY=OFF)
    say "mode full: the system's Debian dev packages"
  else
    TARGETS=()  # everything TESSERA_GPU_CHECK_ONLY configures
    cmake_args+=(-DTESSERA_GPU_CHECK_ONLY=ON)
    if [ ${#debs[@]} -gt 0 ]; then
      say "mode gpu-only: unpacking ${#debs[@]} .deb files from $DEPS_DIR into $DEPS_PREFIX"
      if ! { rm -rf "$DEPS_PREFIX" && mkdir -p "$DEPS_PREFIX"; }; then
        die "cannot create $DEPS_PREFIX" 3
      fi
      for deb in "${debs[@]}"; do
        unpack_deb "$deb" || die "could not unpack $deb (neither dpkg-deb nor ar and tar worked)" 3
      done
      libdir=$DEPS_PREFIX/usr/lib/$MULTIARCH
      # Abseil's targets link -latomic. Use the image's libatomic where its compiler has one;
      # else link to the carried libatomic.so.1 (libatomic1 ships no libatomic.so).
      if [ "$("$CXX_BIN" -print-file-name=libatomic.so)" != libatomic.so ] ||
         [ "$("$CXX_BIN" -print-file-name=libatomic.a)" != libatomic.a ]; then
        rm -f "$libdir"/libatomic.so*
      elif [ -f "$libdir/libatomic.so.1" ]; then
        ln -sf libatomic.so.1 "$libdir/libatomic.so"
        # Only here: a LIBRARY_PATH folder counts as implicit, so CMake leaves it out of RPATH.
        export LIBRARY_PATH=$libdir${LIBRARY_PATH:+:$LIBRARY_PATH}
        say "the compiler has no libatomic; linking the carried one"
      fi
      # CMake finds the config files under usr/lib/<multiarch>/cmake and usr/share/cmake. The
      # binaries' build RPATH names the libraries' folder; LD_LIBRARY_PATH is a second way.
      cmake_args+=(-DCMAKE_PREFIX_PATH="$DEPS_PREFIX/usr;$libdir/cmake")
      export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      # Abseil 20220623's headers lean on <cstdint> arriving through the standard headers,
      # which newer GCCs (13+) no longer guarantee; the image's compiler is newer than Debian 12's.
      cmake_args+=(-DCMAKE_CXX_FLAGS="-include cstdint")
    else
      say "mode gpu-only: no .deb files in $DEPS_DIR, using the system's Abseil, nlohmann-json and GoogleTest"
    fi
  fi
  # The model: the GPU machine gets the repository, not ../shared; fetch_deps.sh copies it.
  if [ -z "${TESSERA_STORIES_DIR:-}" ] && [ ! -f ../shared/models/stories260K/model.safetensors ] &&
     [ -f "$DEPS_DIR/stories260K/model.safetensors" ]; then
    export TESSERA_STORIES_DIR=$ROOT/$DEPS_DIR/stories260K
    say "stories260K from $TESSERA_STORIES_DIR"
  fi

  # ---- Configure (only the first time the folder is used is slow).
  say "configuring $BUILD_DIR (Release, CUDA arch $CUDA_ARCH, time budget ${TIME_BUDGET}s)"
  # shellcheck disable=SC2086
  if ! timeout "$(step_limit 120)" cmake -S . -B "$BUILD_DIR" -G Ninja "${cmake_args[@]}" \
       ${TESSERA_CMAKE_ARGS:-} >"$BUILD_DIR/configure.log" 2>&1; then
    echo "---- configure failed; the relevant lines of $BUILD_DIR/configure.log:" >&2
    grep -E -A3 'Could not find|Could NOT find|not found|CMake Error' "$BUILD_DIR/configure.log" \
      | head -40 >&2
    if [ "$MODE" = full ]; then
      die "CMake could not configure the project. Missing packages above are the Debian 12 dev packages the project needs (scripts/setup.sh lists them); on a machine without them, run benchmarks/gpu/fetch_deps.sh on a Debian 12 machine and carry $DEPS_DIR (benchmarks/gpu/README.md), or point TESSERA_CMAKE_ARGS=-DCMAKE_PREFIX_PATH=... at a copy." 3
    fi
    die "CMake could not configure the gpu-only build; full log in $BUILD_DIR/configure.log" 3
  fi
  if ! grep -q 'CUDA backend enabled' "$BUILD_DIR/configure.log"; then
    grep -i cuda "$BUILD_DIR/configure.log" | head -10 >&2
    die "CMake did not enable CUDA (nvcc at $(command -v nvcc) was not usable); see $BUILD_DIR/configure.log" 3
  fi
  if [ "$MODE" = gpu-only ]; then
    grep -o 'Tessera GPU check: .*' "$BUILD_DIR/configure.log" | while read -r line; do say "$line"; done
  fi

  # ---- Build only what the check needs.
  build_limit=$(step_limit "${limits[0]}")
  say "building ${TARGETS[*]:-the TESSERA_GPU_CHECK_ONLY targets} with $JOBS jobs (limit ${build_limit}s)"
  if ! timeout "$build_limit" ninja -C "$BUILD_DIR" -j "$JOBS" "${TARGETS[@]}" \
       >"$BUILD_DIR/build.log" 2>&1; then
    grep -E -B2 -A6 'error|FAILED' "$BUILD_DIR/build.log" | head -60 >&2
    die "build failed (or took over ${build_limit}s); full log in $BUILD_DIR/build.log" 4
  fi
  say "built"
fi

# ---- The serving benchmark's checkpoint (16 GB, ~40 s of one CPU core), written in the
# background while the tests and gpu_bench run on the GPU.
serve_why=
if [ "${GPU_CHECK_SERVE:-1}" = 0 ]; then serve_why="GPU_CHECK_SERVE=0"
elif [ "$MODE" = gpu-only ]; then serve_why="the gpu-only build has no tessera or tessera-bench"
elif [ ! -x "$BUILD_DIR/bin/tessera" ] || [ ! -x "$BUILD_DIR/bin/tessera-bench" ]; then
  serve_why="no $BUILD_DIR/bin/tessera-bench (a pack from before it was packed: run pack_prebuilt.sh again)"
elif ! command -v python3 >/dev/null 2>&1; then serve_why="no python3 on PATH"
fi
SERVE_MODEL_DIR=
GEN_PID=
serve_cleanup() {
  [ -n "$GEN_PID" ] && kill -TERM "$GEN_PID" 2>/dev/null && wait "$GEN_PID" 2>/dev/null
  [ -n "$SERVE_MODEL_DIR" ] && rm -rf "$SERVE_MODEL_DIR"
}
trap serve_cleanup EXIT
if [ -z "$serve_why" ]; then
  SERVE_MODEL_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tessera-serve-bench-model.XXXXXX") ||
    die "cannot create a temporary folder for the serving benchmark's checkpoint" 3
  say "writing the serving benchmark's checkpoint into $SERVE_MODEL_DIR in the background ($BUILD_DIR/serve_gen.log)"
  benchmarks/gpu/serve_bench.sh --gen-only --device "${SERVE_BENCH_DEVICE:-cuda}" \
    --bin-dir "$BUILD_DIR/bin" --model-dir "$SERVE_MODEL_DIR" --budget "$TIME_BUDGET" \
    >"$BUILD_DIR/serve_gen.log" 2>&1 &
  GEN_PID=$!
fi

# ---- Tests.
test_limit=$(step_limit "${limits[1]}")
say "running ctest -L gpu -j $CTEST_JOBS (limit ${test_limit}s)"
timeout "$test_limit" ctest --test-dir "$BUILD_DIR" -L gpu -j "$CTEST_JOBS" --output-on-failure \
  2>&1 | tee "$BUILD_DIR/ctest.log"
test_rc=${PIPESTATUS[0]}
[ "$test_rc" -eq 124 ] && say "ctest ran out of time after ${test_limit}s"
[ "$test_rc" -ne 0 ] && say "GPU tests FAILED (ctest exit $test_rc); running the benchmark anyway"

# ---- Benchmark.
mkdir -p "$(dirname "$OUT_JSON")"
bench_limit=$(step_limit "${limits[2]}")
if [ "$(remaining)" -lt 30 ]; then
  say "skipping gpu_bench: only $(remaining)s of the ${TIME_BUDGET}s budget left"
  bench_rc=125
else
  say "running gpu_bench -> $OUT_JSON (limit ${bench_limit}s)"
  # shellcheck disable=SC2086
  timeout "$bench_limit" "$BUILD_DIR/benchmarks/gpu/gpu_bench" --out "$OUT_JSON" \
    ${GPU_BENCH_ARGS:-} 2>&1 | tee "$BUILD_DIR/gpu_bench.log"
  bench_rc=${PIPESTATUS[0]}
  if [ "$bench_rc" -eq 124 ]; then say "gpu_bench ran out of time after ${bench_limit}s"
  elif [ "$bench_rc" -ne 0 ]; then say "gpu_bench FAILED (exit $bench_rc)"
  fi
fi

# ---- Serving benchmark: what is left of the budget, at most SERVE_BENCH_BUDGET (300 s), less
# 25 s (the backstop timeout's 15 s over its budget and this summary); under 60 s it is not
# worth a server start.
serve_rc=125
SERVE_STEM=benchmarks/results/gpu_serving-${STAMP}
if [ -z "$serve_why" ]; then
  if kill -0 "$GEN_PID" 2>/dev/null; then
    say "waiting for the serving benchmark's checkpoint"
    while kill -0 "$GEN_PID" 2>/dev/null && [ "$(remaining)" -gt 80 ]; do sleep 1; done
  fi
  if kill -0 "$GEN_PID" 2>/dev/null; then
    gen_rc=124
  else
    wait "$GEN_PID"
    gen_rc=$?
    GEN_PID=
  fi
  serve_budget=$(($(remaining) - 25))
  [ "$serve_budget" -gt "${SERVE_BENCH_BUDGET:-300}" ] && serve_budget=${SERVE_BENCH_BUDGET:-300}
  if [ "$gen_rc" -eq 124 ] && [ -n "$GEN_PID" ]; then
    serve_why="the checkpoint was still being written with $(remaining)s of the ${TIME_BUDGET}s budget left ($BUILD_DIR/serve_gen.log)"
  elif [ "$serve_budget" -lt 60 ]; then
    serve_why="only $(remaining)s of the ${TIME_BUDGET}s budget left"
  else
    [ "$gen_rc" -ne 0 ] && say "writing the checkpoint in the background failed (exit $gen_rc: $(tail -1 "$BUILD_DIR/serve_gen.log")); serve_bench.sh tries again"
    commit=
    [ "$MODE" = prebuilt ] && commit=$(sed -n 's/^commit=//p' "$PREBUILT_DIR/manifest.txt")
    say "running the serving benchmark (budget ${serve_budget}s) -> $SERVE_STEM.{json,md}"
    # The script keeps to its budget itself; the timeout is the backstop.
    SERVE_BENCH_COMMIT=${commit:-${SERVE_BENCH_COMMIT:-}} \
      timeout -k 10 $((serve_budget + 15)) benchmarks/gpu/serve_bench.sh \
      --device "${SERVE_BENCH_DEVICE:-cuda}" --budget "$serve_budget" --bin-dir "$BUILD_DIR/bin" \
      --model-dir "$SERVE_MODEL_DIR" --delete-model --out-stem "$SERVE_STEM" \
      2>&1 | tee "$BUILD_DIR/serve_bench.log"
    serve_rc=${PIPESTATUS[0]}
    [ "$serve_rc" -ne 0 ] && say "the serving benchmark FAILED (exit $serve_rc)"
  fi
fi
serve_cleanup
SERVE_MODEL_DIR=

# ---- Summary.
tests_line=$(grep -E '% tests passed.* out of [0-9]+' "$BUILD_DIR/ctest.log" | tail -1)
skipped=$(grep -c '\*\*\*Skipped' "$BUILD_DIR/ctest.log")
{
  echo "==== gpu-check summary ($(($(date +%s) - start))s)"
  echo "mode:      $MODE$([ "$MODE" = gpu-only ] && echo ' (no cli_run_cuda_test, serving_cuda_test)')"
  echo "tests:     exit $test_rc; ${tests_line:-no ctest summary line}; $skipped skipped"
  [ "$skipped" -gt 0 ] && grep '\*\*\*Skipped' "$BUILD_DIR/ctest.log" | head -5 | sed 's/^/           /'
  if [ "$bench_rc" -eq 0 ]; then
    echo "benchmark: ok, $OUT_JSON (in $ROOT)"
    # The activation dtype of the main tables, and decode at both dtypes (gpu_bench prints
    # "activations" in its header and a second decode table for the other dtype).
    grep -m1 -o '[A-Z0-9]* activations$' "$BUILD_DIR/gpu_bench.log" | sed 's/^/           /'
    grep -A3 '^decode with .* activations' "$BUILD_DIR/gpu_bench.log" | sed 's/^/           /'
  else
    echo "benchmark: exit $bench_rc"
  fi
  if [ -n "$serve_why" ]; then
    echo "serving:   skipped: $serve_why"
  elif [ -f "$SERVE_STEM.json" ]; then
    echo "serving:   exit $serve_rc, $SERVE_STEM.{json,md} (in $ROOT)"
    python3 benchmarks/gpu/serve_bench_summary.py --brief "$SERVE_STEM.json" | sed 's/^/           /'
  else
    echo "serving:   exit $serve_rc, no results (see $BUILD_DIR/serve_bench.log)"
  fi
  echo "logs:      $BUILD_DIR/{configure,build,ctest,gpu_bench,serve_bench}.log${OUT:+; copied to \$OUT}"
  echo "result:    $([ "$test_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && { [ -n "$serve_why" ] || [ "$serve_rc" -eq 0 ]; } && echo PASS || echo FAIL)"
} | tee "$BUILD_DIR/summary.txt"
copy_to_out
[ "$test_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && { [ -n "$serve_why" ] || [ "$serve_rc" -eq 0 ]; }
