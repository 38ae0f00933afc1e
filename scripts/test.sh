#!/usr/bin/env bash
# Quick start 2: install what is needed, build, and run the whole test suite.
#   ./scripts/test.sh                # everything
#   ./scripts/test.sh -L unit        # extra arguments go to ctest (labels: unit, integration, e2e, gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 600 "$@"
