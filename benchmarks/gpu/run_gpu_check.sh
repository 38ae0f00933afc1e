#!/usr/bin/env bash
# One-command GPU check: configures and builds the CUDA backend, the gpu tests and gpu_bench
# (Release, one architecture, only those targets), runs `ctest -L gpu`, then gpu_bench,
# writing benchmarks/results/gpu_check-<date>.json and printing its table.
# Installs nothing and downloads nothing; says what is missing instead.
#
# Environment:
#   BUILD_DIR          build folder (default build-gpu-check)
#   CUDA_ARCH          CMAKE_CUDA_ARCHITECTURES (default 90a: H100/H200)
#   JOBS               parallel compile jobs (default: all cores)
#   TESSERA_CMAKE_ARGS extra CMake arguments, e.g. -DCMAKE_PREFIX_PATH=/opt/deps
#   GPU_BENCH_ARGS     extra gpu_bench arguments, e.g. "--layers 8 --batches 1,64"
#   OUT_JSON           where the JSON goes (default benchmarks/results/gpu_check-<date>.json)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build-gpu-check}
CUDA_ARCH=${CUDA_ARCH:-90a}
JOBS=${JOBS:-$(nproc)}
STAMP=$(date -u +%Y%m%d-%H%M%S)
OUT_JSON=${OUT_JSON:-benchmarks/results/gpu_check-${STAMP}.json}
# The gpu-labelled tests: kernels against the CPU, stories260K through the worker's forward
# pass (cuda_forward_test), `tessera run --device cuda` (cli_run_cuda_test) and a coordinator
# with a CUDA worker (serving_cuda_test, which builds both binaries).
TARGETS=(tessera_kernels_cuda kernels_cuda_test cuda_forward_test tessera cli_run_cuda_test
         serving_cuda_test gpu_bench)
start=$(date +%s)

say() { printf '[gpu-check %4ss] %s\n' "$(($(date +%s) - start))" "$*"; }
die() { printf 'gpu-check: %s\n' "$*" >&2; exit "${2:-1}"; }

# ---- Tools. nvcc is often installed but not on PATH.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
missing=()
for tool in cmake ninja nvcc; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1; then
  missing+=("a C++20 compiler (c++ or g++)")
fi
if [ ${#missing[@]} -gt 0 ]; then
  die "missing tools: ${missing[*]}. Install them (Debian: cmake ninja-build g++; CUDA toolkit for nvcc) and rerun; this script installs nothing." 2
fi
cmake_version=$(cmake --version | head -1 | awk '{print $3}')
if [ "$(printf '%s\n3.25\n' "$cmake_version" | sort -V | head -1)" != "3.25" ]; then
  die "cmake $cmake_version is too old; the project needs 3.25 or newer" 2
fi
say "cmake $cmake_version, ninja $(ninja --version), $(nvcc --version | tail -1)"
if command -v nvidia-smi >/dev/null 2>&1; then
  say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
else
  say "nvidia-smi not found; the tests will report whether a device is usable"
fi
command -v ccache >/dev/null 2>&1 && say "ccache found: compiles are cached"

# ---- Configure (only the first time the folder is used is slow).
mkdir -p "$BUILD_DIR"
say "configuring $BUILD_DIR (Release, CUDA arch $CUDA_ARCH)"
# shellcheck disable=SC2086
if ! cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DTESSERA_ENABLE_CUDA=ON \
     -DTESSERA_BUILD_TESTS=ON -DTESSERA_BUILD_BENCHMARKS=ON ${TESSERA_CMAKE_ARGS:-} \
     >"$BUILD_DIR/configure.log" 2>&1; then
  echo "---- configure failed; the relevant lines of $BUILD_DIR/configure.log:" >&2
  grep -E -A3 'Could not find|Could NOT find|not found|CMake Error' "$BUILD_DIR/configure.log" \
    | head -40 >&2
  die "CMake could not configure the project. Missing packages above are the Debian 12 dev packages the project needs (scripts/setup.sh lists them); point TESSERA_CMAKE_ARGS=-DCMAKE_PREFIX_PATH=... at a copy if they live elsewhere." 3
fi
if ! grep -q 'CUDA backend enabled' "$BUILD_DIR/configure.log"; then
  grep -i cuda "$BUILD_DIR/configure.log" | head -10 >&2
  die "CMake did not enable CUDA (nvcc at $(command -v nvcc) was not usable); see $BUILD_DIR/configure.log" 3
fi

# ---- Build only what the check needs.
say "building ${TARGETS[*]} with $JOBS jobs"
if ! timeout 600 ninja -C "$BUILD_DIR" -j "$JOBS" "${TARGETS[@]}" >"$BUILD_DIR/build.log" 2>&1; then
  grep -E -B2 -A6 'error|FAILED' "$BUILD_DIR/build.log" | head -60 >&2
  die "build failed (or took over 10 minutes); full log in $BUILD_DIR/build.log" 4
fi

# ---- Tests.
say "running ctest -L gpu"
timeout 240 ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure
test_rc=$?
if [ $test_rc -ne 0 ]; then
  say "GPU tests FAILED (ctest exit $test_rc); running the benchmark anyway"
fi

# ---- Benchmark.
mkdir -p "$(dirname "$OUT_JSON")"
say "running gpu_bench -> $OUT_JSON"
# shellcheck disable=SC2086
timeout 300 "$BUILD_DIR/benchmarks/gpu/gpu_bench" --out "$OUT_JSON" ${GPU_BENCH_ARGS:-}
bench_rc=$?
[ $bench_rc -ne 0 ] && say "gpu_bench FAILED (exit $bench_rc)"

say "done: tests exit $test_rc, benchmark exit $bench_rc, results in $OUT_JSON (relative to $ROOT)"
[ $test_rc -eq 0 ] && [ $bench_rc -eq 0 ]
