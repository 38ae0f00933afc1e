#!/usr/bin/env bash
# Configures and builds Tessera into ${BUILD_DIR:-build}. Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@" >/dev/null
ninja -C "$BUILD_DIR" -j "$JOBS" ${TARGETS:-}
