#!/usr/bin/env bash
# Serving sweep: generates a ~1B-parameter random BF16 Llama (llama-1b preset) unless it
# exists, measures batch-1 decode against the memory roofline, then for each --tp starts
# `tessera serve` and runs tessera-bench at each concurrency; writes
# <OUT_DIR>/<PREFIX>_*.json, PNG charts and <PREFIX>_summary.md (plot_sweep.py).
#
#   benchmarks/report/run_sweep.sh           the full sweep (long on a CPU machine)
#   benchmarks/report/run_sweep.sh --short   few requests, short outputs: a quick look
#
# Environment (defaults in brackets): BUILD_DIR [build], MODEL_DIR [/tmp/tessera-llama-1b-bf16],
# OUT_DIR [benchmarks/results], PREFIX [sweep or sweep_short], TPS ["1 2"],
# CONCURRENCY ["1 4 16 32 64"], INPUT_LEN [128; short 32], OUTPUT_LEN [128; short 16],
# REQUESTS_PER_SLOT [4; short 1]: requests = max(MIN_REQUESTS, concurrency x this),
# MIN_REQUESTS [8; short 4], WARMUP [2; short 1], KV_MEMORY_MB [2048], THREADS [0: serve's default],
# PORT [first free from 50300].
set -euo pipefail
cd "$(dirname "$0")/../.."

SHORT=0
[[ "${1:-}" == "--short" ]] && SHORT=1
BUILD_DIR=${BUILD_DIR:-build}
BIN=$BUILD_DIR/bin
MODEL_DIR=${MODEL_DIR:-/tmp/tessera-llama-1b-bf16}
OUT_DIR=${OUT_DIR:-benchmarks/results}
TPS=${TPS:-"1 2"}
CONCURRENCY=${CONCURRENCY:-"1 4 16 32 64"}
KV_MEMORY_MB=${KV_MEMORY_MB:-2048}
THREADS=${THREADS:-0}
if [[ $SHORT == 1 ]]; then
  PREFIX=${PREFIX:-sweep_short}; INPUT_LEN=${INPUT_LEN:-32}; OUTPUT_LEN=${OUTPUT_LEN:-16}
  REQUESTS_PER_SLOT=${REQUESTS_PER_SLOT:-1}; MIN_REQUESTS=${MIN_REQUESTS:-4}; WARMUP=${WARMUP:-1}
else
  PREFIX=${PREFIX:-sweep}; INPUT_LEN=${INPUT_LEN:-128}; OUTPUT_LEN=${OUTPUT_LEN:-128}
  REQUESTS_PER_SLOT=${REQUESTS_PER_SLOT:-4}; MIN_REQUESTS=${MIN_REQUESTS:-8}; WARMUP=${WARMUP:-2}
fi

for b in tessera tessera-bench tessera-roofline tessera-coordinator tessera-worker; do
  [[ -x $BIN/$b ]] || { echo "run_sweep: $BIN/$b is missing; build it first (scripts/build.sh)" >&2; exit 1; }
done
mkdir -p "$OUT_DIR"
LOG_DIR=$(mktemp -d /tmp/tessera-sweep.XXXXXX)
echo "run_sweep: logs in $LOG_DIR"

if [[ ! -f $MODEL_DIR/config.json ]]; then
  echo "run_sweep: generating llama-1b (bf16) into $MODEL_DIR"
  "$BIN/tessera" gen-checkpoint --preset llama-1b --dtype bf16 --out "$MODEL_DIR"
fi

# Batch-1 decode: the roofline report and `tessera run` for comparison.
CONTEXT=$((INPUT_LEN + OUTPUT_LEN))
"$BIN/tessera-roofline" --model "$MODEL_DIR" --batch 1 --tokens "$CONTEXT" --steps 8 \
  --out "$OUT_DIR/${PREFIX}_roofline_b1.json" | tee "$LOG_DIR/roofline_b1.txt"
"$BIN/tessera" run --model "$MODEL_DIR" --prompt-ids "$(seq -s, 3 $((INPUT_LEN + 2)))" \
  --max-tokens "$OUTPUT_LEN" --temperature 0 --ignore-eos --json --quiet > "$OUT_DIR/${PREFIX}_run_batch1.json"

free_port() {  # Two consecutive free ports (serve uses PORT + 1 for workers).
  /usr/bin/python3 - "$1" <<'PY'
import socket, sys
p = int(sys.argv[1])
while True:
    try:
        for q in (p, p + 1):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
        print(p); break
    except OSError:
        p += 2
PY
}

# shellcheck source=benchmarks/lib/serve.sh
source benchmarks/lib/serve.sh
trap stop_serve EXIT

for tp in $TPS; do
  port=$(free_port "${PORT:-50300}")
  echo "run_sweep: tp $tp on port $port"
  "$BIN/tessera" serve --model "$MODEL_DIR" --tp "$tp" --port "$port" --threads "$THREADS" \
    --kv-memory-mb "$KV_MEMORY_MB" --http-port 0 --insecure > "$LOG_DIR/serve_tp$tp.log" 2>&1 &
  SERVE_PID=$!
  for c in $CONCURRENCY; do
    n=$((c * REQUESTS_PER_SLOT)); (( n < MIN_REQUESTS )) && n=$MIN_REQUESTS
    echo "run_sweep: tp $tp, concurrency $c, $n requests"
    "$BIN/tessera-bench" --address "127.0.0.1:$port" --wait-ready-s 900 --num-requests "$n" \
      --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --max-concurrency "$c" --warmup "$WARMUP" \
      --timeout-s 3600 --label "$PREFIX tp$tp c$c" --out "$OUT_DIR/${PREFIX}_tp${tp}_c${c}.json" \
      | tee "$LOG_DIR/bench_tp${tp}_c${c}.txt"
  done
  stop_serve
done

/usr/bin/python3 benchmarks/report/plot_sweep.py "$OUT_DIR" --prefix "$PREFIX"
