#!/usr/bin/env bash
# Quick start 1: install what is needed, build, and generate text from stories260K.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL_DIR=${TESSERA_MODEL_DIR:-../shared/models/stories260K}
./scripts/setup.sh
TARGETS=tessera ./scripts/build.sh
if [ ! -f "$MODEL_DIR/model.safetensors" ]; then
  cat <<MSG
demo: no model found at $MODEL_DIR.
  Point TESSERA_MODEL_DIR at a Hugging Face Llama folder (config.json, model.safetensors,
  tokenizer.json), or convert a llama2.c checkpoint, e.g. stories260K from
  huggingface.co/karpathy/tinyllamas:
    build/bin/tessera convert-llama2c --checkpoint stories260K.bin --tokenizer tok512.bin --out models/stories260K
    TESSERA_MODEL_DIR=models/stories260K ./scripts/demo.sh
MSG
  exit 1
fi
build/bin/tessera run --model "$MODEL_DIR" --prompt "${PROMPT:-Once upon a time}" \
  --max-tokens "${MAX_TOKENS:-60}" --temperature 0
