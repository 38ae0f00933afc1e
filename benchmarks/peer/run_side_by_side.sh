#!/usr/bin/env bash
# One command for the side-by-side with llama.cpp (see README.md beside this file):
#   PEER_SRC=/path/to/llama.cpp benchmarks/peer/run_side_by_side.sh
# Environment: PEER_SRC (required: a llama.cpp source tree, never modified), WORK (default
# /tmp/tessera-peer: peer build and both checkpoints, ~12 GB), SHARED_DIR (default
# ../shared), BUILD_DIR (default build), REPS (2), THREADS (2), CONCURRENCY (1,4,16,32),
# OUT (default benchmarks/results/peer_side_by_side): OUT.json and OUT.md are written.
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../.."
: "${PEER_SRC:?set PEER_SRC to a llama.cpp source tree}"
WORK=${WORK:-/tmp/tessera-peer}
SHARED_DIR=${SHARED_DIR:-../shared}
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-benchmarks/results/peer_side_by_side}
[ -x "$BUILD_DIR/bin/tessera" ] || { echo "run_side_by_side: build Tessera first (scripts/build.sh)" >&2; exit 1; }
if [ ! -x "$WORK/peer/build/bin/llama-bench" ]; then
  benchmarks/peer/build_peer.sh "$PEER_SRC" "$WORK/peer"
fi
benchmarks/peer/prepare_models.sh "$SHARED_DIR/peer" "$SHARED_DIR/models/stories260K/tok512.bin" \
  "$BUILD_DIR/bin" "$WORK/peer/build/bin" "$WORK/models"
python3 benchmarks/peer/side_by_side.py --tessera-bin "$BUILD_DIR/bin" \
  --peer-bin "$WORK/peer/build/bin" --peer-revision "$(cat "$WORK/peer/peer_revision.txt")" \
  --hf-model "$WORK/models/tl-hf-bf16" --gguf "$WORK/models/tl-bf16.gguf" \
  --threads "${THREADS:-2}" --reps "${REPS:-2}" --concurrency "${CONCURRENCY:-1,4,16,32}" \
  --out-json "$OUT.json" --out-md "$OUT.md" ${SIDE_BY_SIDE_FLAGS:-}
