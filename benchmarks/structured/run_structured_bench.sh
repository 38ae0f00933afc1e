#!/usr/bin/env bash
# What structured outputs cost, measured in one run on one machine:
#  1. compile: `tessera constrain` on typical schemas (make_schemas.py: 10-20 properties)
#     against the real 128k Llama 3 vocabulary: schema -> GBNF -> grammar, the first mask,
#     and every mask of a whole document on a cold cache;
#  2. decode: TPOT of `tessera serve` on the llama-1b preset (random weights, the real
#     Llama 3 tokenizer) through tessera-bench at concurrency 1 and 32, free text against
#     a JSON-schema constraint, alternated A/B/A/B (only ratios from one run count), and
#     rank 0's own count of the time it spent on grammars (worker metrics), which a
#     shared machine's noise does not blur.
# Writes <OUT_DIR>/<PREFIX>.json (every run, the ratios, machine and build) and <PREFIX>.md.
#
#   benchmarks/structured/run_structured_bench.sh
#
# Environment (defaults in brackets): BUILD_DIR [build], MODEL_DIR [/tmp/tessera-llama-1b-llama3tok],
# OUT_DIR [benchmarks/results], PREFIX [structured_outputs_llama1b], REPS [3],
# OUTPUT_LEN [64], INPUT_LEN [32], REQUESTS_C1 [8], REQUESTS_C32 [64], THREADS [0], PORT [50520].
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD_DIR=${BUILD_DIR:-build}
BIN=$BUILD_DIR/bin
MODEL_DIR=${MODEL_DIR:-/tmp/tessera-llama-1b-llama3tok}
OUT_DIR=${OUT_DIR:-benchmarks/results}
PREFIX=${PREFIX:-structured_outputs_llama1b}
REPS=${REPS:-3}
OUTPUT_LEN=${OUTPUT_LEN:-64}
INPUT_LEN=${INPUT_LEN:-32}
REQUESTS_C1=${REQUESTS_C1:-8}
REQUESTS_C32=${REQUESTS_C32:-64}
THREADS=${THREADS:-0}
PORT=${PORT:-50520}
METRICS_PORT=$((PORT + 50))

for b in tessera tessera-bench tessera-coordinator tessera-worker; do
  [[ -x $BIN/$b ]] || { echo "run_structured_bench: $BIN/$b is missing; build it first (scripts/build.sh)" >&2; exit 1; }
done
if [[ ! -f $MODEL_DIR/config.json ]]; then
  echo "run_structured_bench: generating llama-1b (bf16) with the real Llama 3 tokenizer into $MODEL_DIR"
  "$BIN/tessera" gen-checkpoint --preset llama-1b --dtype bf16 --out "$MODEL_DIR"
  python3 scripts/llama3_tokenizer_json.py --out "$MODEL_DIR"
fi
mkdir -p "$OUT_DIR"
WORK=$(mktemp -d /tmp/tessera-structured.XXXXXX)
echo "run_structured_bench: logs and raw results in $WORK"
python3 benchmarks/structured/make_schemas.py --count 20 --seed 1 \
  --out-jsonl "$WORK/schemas.jsonl" --out-first "$WORK/schema.json"

echo "run_structured_bench: compile and mask costs (tessera constrain, 20 schemas x 5 documents)"
"$BIN/tessera" constrain --model "$MODEL_DIR" --schemas-jsonl "$WORK/schemas.jsonl" --samples 5 \
  --seed 1 --max-tokens 2000 > "$WORK/constrain.jsonl"
tail -1 "$WORK/constrain.jsonl"
# One schema on its own: the cold cost of its first document, then warm ones.
"$BIN/tessera" constrain --model "$MODEL_DIR" --json-schema "$WORK/schema.json" --samples 1 \
  --seed 2 --max-tokens 2000 > "$WORK/constrain_one_cold.jsonl"
"$BIN/tessera" constrain --model "$MODEL_DIR" --json-schema "$WORK/schema.json" --samples 20 \
  --seed 2 --max-tokens 2000 > "$WORK/constrain_one_warm.jsonl"

# shellcheck source=benchmarks/lib/serve.sh
source benchmarks/lib/serve.sh
trap stop_serve EXIT
"$BIN/tessera" serve --model "$MODEL_DIR" --port "$PORT" --threads "$THREADS" --kv-memory-mb 2048 \
  --http-port 0 --metrics-port "$METRICS_PORT" --insecure > "$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for rep in $(seq 1 "$REPS"); do
  for concurrency in 1 32; do
    requests=$((concurrency == 1 ? REQUESTS_C1 : REQUESTS_C32))
    for mode in free schema; do
      flags=()
      # Each arm its own random prompts: the same prompts would find the previous arm's
      # prefill in the prefix cache.
      seed=$((rep * 10))
      if [[ $mode == schema ]]; then
        flags=(--json-schema "$WORK/schema.json")
        seed=$((seed + 1))
      fi
      echo "run_structured_bench: rep $rep, concurrency $concurrency, $mode"
      "$BIN/tessera-bench" --address "127.0.0.1:$PORT" --wait-ready-s 900 --workload fixed \
        --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --num-requests "$requests" \
        --warmup "$concurrency" --max-concurrency "$concurrency" --seed "$seed" --timeout-s 3600 \
        --label "$mode c$concurrency rep $rep" --out "$WORK/bench_${mode}_c${concurrency}_$rep.json" \
        "${flags[@]}" | grep -E "TPOT|output token throughput" || true
      # Rank 0's own account of its grammar work (counters; the summary takes differences).
      curl -s "http://127.0.0.1:$((METRICS_PORT + 1))/metrics" | grep -E "^tessera_worker_grammar_" \
        > "$WORK/grammar_${mode}_c${concurrency}_$rep.txt" || true
    done
  done
done
stop_serve

python3 benchmarks/structured/summarize.py "$WORK" --reps "$REPS" --model "$MODEL_DIR" \
  --out "$OUT_DIR/$PREFIX.json" --markdown "$OUT_DIR/$PREFIX.md"
cat "$OUT_DIR/$PREFIX.md"
