#!/usr/bin/env bash
# Speculative decoding at batch 1: decode tokens/s with and without it, alternated
# A/B/A/B in one run (only ratios from one run count), on a repeated-span workload and
# on random prompts (make_workloads.py), through `tessera serve` and tessera-bench at
# concurrency 1. Acceptance comes from the coordinator's /metrics after each workload.
# Writes <OUT_DIR>/<PREFIX>.json (every run and the ratios) and <PREFIX>.md.
#
#   benchmarks/speculative/run_spec_decode.sh
#
# Environment (defaults in brackets): BUILD_DIR [build], MODEL_DIR [/tmp/tessera-llama-1b-bf16,
# generated from the llama-1b preset when missing], OUT_DIR [benchmarks/results],
# PREFIX [spec_decode_llama1b], SPEC_FLAGS ["--speculative ngram --num-speculative-tokens 3
# --prompt-lookup-min 1 --prompt-lookup-max 4"], REPS [2], REQUESTS [4], OUTPUT_LEN [128],
# THREADS [0], PORT [50420].
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD_DIR=${BUILD_DIR:-build}
BIN=$BUILD_DIR/bin
MODEL_DIR=${MODEL_DIR:-/tmp/tessera-llama-1b-bf16}
OUT_DIR=${OUT_DIR:-benchmarks/results}
PREFIX=${PREFIX:-spec_decode_llama1b}
SPEC_FLAGS=${SPEC_FLAGS:-"--speculative ngram --num-speculative-tokens 3 --prompt-lookup-min 1 --prompt-lookup-max 4"}
REPS=${REPS:-2}
REQUESTS=${REQUESTS:-4}
OUTPUT_LEN=${OUTPUT_LEN:-128}
THREADS=${THREADS:-0}
PORT=${PORT:-50420}
METRICS_PORT=$((PORT + 50))

for b in tessera tessera-bench tessera-coordinator tessera-worker; do
  [[ -x $BIN/$b ]] || { echo "run_spec_decode: $BIN/$b is missing; build it first (scripts/build.sh)" >&2; exit 1; }
done
if [[ ! -f $MODEL_DIR/config.json ]]; then
  echo "run_spec_decode: generating llama-1b (bf16) into $MODEL_DIR"
  "$BIN/tessera" gen-checkpoint --preset llama-1b --dtype bf16 --out "$MODEL_DIR"
fi
mkdir -p "$OUT_DIR"
WORK=$(mktemp -d /tmp/tessera-spec.XXXXXX)
echo "run_spec_decode: logs and raw results in $WORK"
VOCAB=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$MODEL_DIR/config.json")
/usr/bin/python3 benchmarks/speculative/make_workloads.py --vocab "$VOCAB" --out-prefix "$WORK/prompts" \
  --num-prompts $((REQUESTS + 1)) --output-len "$OUTPUT_LEN"

# shellcheck source=benchmarks/lib/serve.sh
source benchmarks/lib/serve.sh
trap stop_serve EXIT

for rep in $(seq 1 "$REPS"); do
  for mode in off on; do
    flags=""
    [[ $mode == on ]] && flags=$SPEC_FLAGS
    echo "run_spec_decode: rep $rep, speculation $mode"
    # shellcheck disable=SC2086
    "$BIN/tessera" serve --model "$MODEL_DIR" --port "$PORT" --threads "$THREADS" --kv-memory-mb 1024 \
      --http-port 0 --metrics-port "$METRICS_PORT" --insecure $flags > "$WORK/serve_${mode}_$rep.log" 2>&1 &
    SERVE_PID=$!
    for workload in repeated random; do
      "$BIN/tessera-bench" --address "127.0.0.1:$PORT" --wait-ready-s 900 --workload jsonl \
        --dataset "$WORK/prompts_$workload.jsonl" --num-requests "$REQUESTS" --warmup 1 --max-concurrency 1 \
        --timeout-s 3600 --label "spec $mode $workload rep $rep" --out "$WORK/bench_${mode}_${workload}_$rep.json" \
        | grep -E "TPOT|output token throughput" || true
      curl -s "http://127.0.0.1:$METRICS_PORT/metrics" > "$WORK/metrics_${mode}_${workload}_$rep.txt"
    done
    stop_serve
  done
done

/usr/bin/python3 benchmarks/speculative/summarize.py "$WORK" --reps "$REPS" --spec-flags "$SPEC_FLAGS" \
  --model "$MODEL_DIR" --out "$OUT_DIR/$PREFIX.json" --markdown "$OUT_DIR/$PREFIX.md"
cat "$OUT_DIR/$PREFIX.md"
