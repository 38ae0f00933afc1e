#!/usr/bin/env bash
# Writes the same random 1B checkpoint for both sides (procedure of shared/peer/README.md):
#   benchmarks/peer/prepare_models.sh SHARED_PEER_DIR TOKENIZER_BIN TESSERA_BIN PEER_BIN WORK
# WORK/tl.bin            llama2.c checkpoint, TinyLlama-1.1B dimensions, vocab 512 (3.9 GB F32)
# WORK/tl-hf-bf16/       Tessera's Hugging Face folder, BF16 (1.94 GB)
# WORK/tl-f32.gguf, WORK/tl-bf16.gguf   the peer's, the second quantized from the first
# Steps whose output exists are skipped, so a second run costs nothing.
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
  exit 0
fi
peer_dir=${1:?usage}; tok=${2:?usage}; tbin=${3:?usage}; pbin=${4:?usage}; work=${5:?usage}
mkdir -p "$work"
# Absolute paths: the peer's converter runs inside $work.
peer_dir=$(realpath "$peer_dir"); tok=$(realpath "$tok"); tbin=$(realpath "$tbin")
pbin=$(realpath "$pbin"); work=$(realpath "$work")
if [ ! -f "$work/tl.bin" ]; then
  echo "prepare: writing the random llama2.c checkpoint"
  python3 "$peer_dir/make_random_llama2c.py" "$work/tl.bin.tmp" 2048 5632 22 32 4 512 2048 --seed 1
  mv "$work/tl.bin.tmp" "$work/tl.bin"
fi
if [ ! -f "$work/tl-hf-bf16/model.safetensors" ]; then
  echo "prepare: converting for Tessera"
  rm -rf "$work/tl-hf-f32" "$work/tl-hf-bf16.tmp"
  "$tbin/tessera" convert-llama2c --checkpoint "$work/tl.bin" --tokenizer "$tok" --out "$work/tl-hf-f32"
  mkdir -p "$work/tl-hf-bf16.tmp"
  python3 "$peer_dir/safetensors_f32_to_bf16.py" "$work/tl-hf-f32/model.safetensors" \
    "$work/tl-hf-bf16.tmp/model.safetensors"
  for f in "$work/tl-hf-f32"/*; do
    [ "$(basename "$f")" = model.safetensors ] || cp "$f" "$work/tl-hf-bf16.tmp/"
  done
  python3 - "$work/tl-hf-bf16.tmp/config.json" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["torch_dtype"] = "bfloat16"
json.dump(c, open(p, "w"), indent=2)
PY
  rm -rf "$work/tl-hf-f32"
  mv "$work/tl-hf-bf16.tmp" "$work/tl-hf-bf16"
fi
if [ ! -f "$work/tl-bf16.gguf" ]; then
  echo "prepare: converting for the peer"
  (cd "$work" && "$pbin/llama-convert-llama2c-to-ggml" --copy-vocab-from-model "$tok" \
     --llama2c-model "$work/tl.bin" --llama2c-output-model "$work/tl-f32.gguf")
  "$pbin/llama-quantize" "$work/tl-f32.gguf" "$work/tl-bf16.gguf.tmp" BF16
  mv "$work/tl-bf16.gguf.tmp" "$work/tl-bf16.gguf"
  rm -f "$work/tl-f32.gguf"
fi
ls -la "$work" "$work/tl-hf-bf16"
