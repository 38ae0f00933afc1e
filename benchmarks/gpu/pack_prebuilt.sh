#!/usr/bin/env bash
# Builds the GPU check's binaries here (Debian 12 with the CUDA toolkit; no GPU needed) for one
# architecture and packs them into PREBUILT_DIR (default .gpu-prebuilt, ignored by git), as one
# xz archive with a manifest beside it, with
# what a bare CUDA image lacks: the Debian shared libraries they load (Abseil, gRPC, protobuf,
# ...; not libc, libstdc++, cuBLAS or NCCL, which the image has) and the stories260K model.
# Carried to the lent GPU machine, run_gpu_check.sh then runs the tests and gpu_bench at once
# (its "prebuilt" mode) instead of spending minutes of device time on the build, and the
# full-mode tests (cli_run_cuda_test, serving_cuda_test) come along, which the gpu-only build
# cannot link there. benchmarks/gpu/README.md says how to carry it.
#
# Environment:
#   BUILD_DIR      build folder (default build-h200); its absolute path is compiled into the
#                  tests, and the check recreates it on the device through a symbolic link
#   CUDA_ARCH      CMAKE_CUDA_ARCHITECTURES (default 90a: H100/H200)
#   PREBUILT_DIR   where the pack goes (default .gpu-prebuilt)
#   STORIES_DIR    the model to copy (default $TESSERA_STORIES_DIR or ../shared/models/stories260K)
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build-h200}
CUDA_ARCH=${CUDA_ARCH:-90a}
PREBUILT_DIR=${PREBUILT_DIR:-.gpu-prebuilt}
STORIES_DIR=${STORIES_DIR:-${TESSERA_STORIES_DIR:-../shared/models/stories260K}}
LIMIT_MIB=56  # the device call carries 64 MiB in all, the working tree (about 4 MiB) included

# The gpu-labelled test binaries, the programs they start, and the benchmarks (gpu_bench;
# tessera-bench drives serve_bench.sh, the serving benchmark).
TESTS=(kernels_cuda_test cuda_forward_test cuda_int4_forward_test cuda_variants_forward_test
       cuda_tensor_parallel_forward_test nccl_communicator_test cli_run_cuda_test
       serving_cuda_test tp_one_device_cuda_test cuda_graph_steps_test)
PROGRAMS=(tessera tessera-coordinator tessera-worker tessera-bench gpu_bench)

die() { printf 'pack_prebuilt: %s\n' "$*" >&2; exit 1; }

echo "pack_prebuilt: building ${TESTS[*]} ${PROGRAMS[*]} in $BUILD_DIR (CUDA arch $CUDA_ARCH)"
BUILD_DIR=$BUILD_DIR TARGETS="${TESTS[*]} ${PROGRAMS[*]}" ./scripts/build.sh \
  -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DTESSERA_ENABLE_CUDA=ON -DTESSERA_BUILD_TESTS=ON \
  -DTESSERA_BUILD_BENCHMARKS=ON -DTESSERA_GPU_CHECK_ONLY=OFF

# The tree is staged, then archived: the binaries each carry the whole fatbin and shrink to a
# sixth under xz, which fits the carry limit.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build" "$stage/lib"
# ctest reads every CTestTestfile.cmake and the discovered-test lists beside the binaries; a
# test whose list is absent becomes <name>_NOT_BUILT, which has no label and so stays out of
# `ctest -L gpu`.
(cd "$BUILD_DIR" && find . -name CTestTestfile.cmake -o -name '*_include.cmake') |
  while read -r f; do
    mkdir -p "$stage/build/$(dirname "$f")"
    cp "$BUILD_DIR/$f" "$stage/build/$f"
  done
binaries=()
for name in "${TESTS[@]}" "${PROGRAMS[@]}"; do
  f=$(cd "$BUILD_DIR" && find . -type f -name "$name" -perm -u+x | head -1)
  [ -n "$f" ] || die "$name was not built in $BUILD_DIR"
  mkdir -p "$stage/build/$(dirname "$f")"
  # Symbols only; the device code (the fatbin) is data and stays.
  strip --strip-unneeded -o "$stage/build/$f" "$BUILD_DIR/$f"
  tests_list="$BUILD_DIR/$f[1]_tests.cmake"
  [ -f "$tests_list" ] && cp "$tests_list" "$stage/build/$f[1]_tests.cmake"
  binaries+=("$BUILD_DIR/$f")
done

# The shared libraries they load, less those every CUDA image has: the C runtime, the C++
# runtime (the image's is newer and backward compatible) and the CUDA libraries, which must
# match the device's driver and are far too large to carry.
ldd "${binaries[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r soname path; do
    case "$soname" in
      libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*|libstdc++.so.*|\
      libgcc_s.so.*|libcublas*|libcudart*|libnccl*|libcuda.so*) continue ;;
    esac
    cp -L "$path" "$stage/lib/$soname"
  done

if [ -f "$STORIES_DIR/model.safetensors" ]; then
  mkdir -p "$stage/stories260K"
  cp "$STORIES_DIR"/* "$stage/stories260K/"
  chmod -R u+w "$stage/stories260K"
else
  echo "pack_prebuilt: warning: no model at $STORIES_DIR; the forward tests will skip on the device" >&2
fi

rm -rf "$PREBUILT_DIR"
mkdir -p "$PREBUILT_DIR"
echo "pack_prebuilt: compressing $(du -sm "$stage" | cut -f1) MiB"
tar -C "$stage" -cf - . | xz -6 -T0 >"$PREBUILT_DIR/prebuilt.tar.xz"

# What the device side needs to recreate the paths compiled into the tests.
{
  echo "source_dir=$ROOT"
  echo "build_dir=$(cd "$BUILD_DIR" && pwd)"
  echo "cuda_arch=$CUDA_ARCH"
  echo "commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/results' || echo '+dirty')"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(nvcc --version | tail -1)"
} >"$PREBUILT_DIR/manifest.txt"

total_kib=$(du -sk "$PREBUILT_DIR" | cut -f1)
echo "pack_prebuilt: $PREBUILT_DIR holds $((total_kib / 1024)) MiB ($(ls "$stage/lib" | wc -l) libraries)"
cat "$PREBUILT_DIR/manifest.txt"
[ "$total_kib" -le $((LIMIT_MIB * 1024)) ] ||
  die "$PREBUILT_DIR is over $LIMIT_MIB MiB; the device call carries 64 MiB in all"
