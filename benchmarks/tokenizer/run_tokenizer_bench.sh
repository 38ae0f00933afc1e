#!/usr/bin/env bash
# Builds the inputs of tokenizer_bench and runs it on the real Llama 3 tokenizer:
#   - tokenizer: llama-models' tiktoken file converted by scripts/llama3_tokenizer_json.py
#   - english.txt: 5 MB of generated English prose (scripts/tokenizer_corpus.py; a small
#     vocabulary, so the pre-token cache hits often)
#   - licenses.txt: the Debian license texts (/usr/share/common-licenses, ~250 KB of real
#     English; the first pass over it is close to a cold cache)
#   - mixed.jsonl: the exactness corpus (code, numbers, CJK, emoji, whitespace runs, ...)
# Usage: benchmarks/tokenizer/run_tokenizer_bench.sh [BUILD_DIR] [OUT_JSON] [LABEL]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build}
OUT=${2:-benchmarks/results/tokenizer_llama3.json}
LABEL=${3:-}
BENCH="$BUILD_DIR/bin/tokenizer_bench"
[ -x "$BENCH" ] || { echo "run_tokenizer_bench: $BENCH is missing (build target tokenizer_bench)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/tessera-tokenizer-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
python3 scripts/llama3_tokenizer_json.py --out "$WORK/llama3"
python3 scripts/tokenizer_corpus.py --out "$WORK/english.txt" --english-bytes 5000000
python3 scripts/tokenizer_corpus.py --out "$WORK/mixed.jsonl"
# Regular files only (GPL, LGPL, GFDL are links to a versioned copy), in name order.
find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat > "$WORK/licenses.txt"
"$BENCH" --model "$WORK/llama3" --corpus "$WORK/english.txt,$WORK/licenses.txt,$WORK/mixed.jsonl" \
  --out "$OUT" --label "$LABEL"
