#!/usr/bin/env bash
# Quick start 1: install what is needed, build, serve stories260K on a local cluster
# (a coordinator and two tensor-parallel workers) and generate text through the API.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL_DIR=${TESSERA_MODEL_DIR:-../shared/models/stories260K}
PORT=${PORT:-50051}
./scripts/setup.sh
TARGETS="tessera tessera-coordinator tessera-worker" ./scripts/build.sh
if [ ! -f "$MODEL_DIR/model.safetensors" ]; then
  cat <<MSG
demo: no model found at $MODEL_DIR.
  Point TESSERA_MODEL_DIR at a Hugging Face Llama folder (config.json, model.safetensors,
  tokenizer.json), or convert a llama2.c checkpoint, e.g. stories260K or stories15M from
  huggingface.co/karpathy/tinyllamas (files stories260K.bin + tok512.bin):
    build/bin/tessera convert-llama2c --checkpoint stories260K.bin --tokenizer tok512.bin --out models/stories260K
    TESSERA_MODEL_DIR=models/stories260K ./scripts/demo.sh
MSG
  exit 1
fi

echo "demo: single process:  tessera run"
build/bin/tessera run --model "$MODEL_DIR" --prompt "${PROMPT:-Once upon a time}" \
  --max-tokens "${MAX_TOKENS:-60}" --temperature 0

echo
echo "demo: local cluster:   tessera serve --tp 2  +  tessera generate --stream (TLS)"
# Secure by default: serve makes a throwaway CA, serves the API with TLS and runs the
# cluster with mutual TLS; the client trusts the CA it copies out.
CA_FILE=/tmp/tessera-demo-ca-$$.pem
build/bin/tessera serve --model "$MODEL_DIR" --tp 2 --port "$PORT" --api-ca-out "$CA_FILE" \
  2>/tmp/tessera-demo-serve.log &
SERVE_PID=$!
trap 'kill -INT $SERVE_PID 2>/dev/null; wait $SERVE_PID 2>/dev/null || true; rm -f "$CA_FILE"' EXIT
for _ in $(seq 100); do [ -s "$CA_FILE" ] && break; sleep 0.1; done  # Written at startup.
build/bin/tessera generate --server "127.0.0.1:$PORT" --tls-ca "$CA_FILE" --wait-ready 120 --stream \
  --prompt "${PROMPT:-Once upon a time}" --max-tokens "${MAX_TOKENS:-60}" --temperature 0
build/bin/tessera generate --server "127.0.0.1:$PORT" --tls-ca "$CA_FILE" --json \
  --prompt "${PROMPT:-Once upon a time}" --max-tokens 8 --temperature 0
