#!/usr/bin/env bash
# Measures the figures of README.md's "Figures" table that have no raw result elsewhere and
# writes one JSON file per figure, each with its conditions (date, machine, commit, build,
# load average before and after, exact commands) and every raw sample.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: benchmarks/readme_figures.sh [--help] [FIGURE...]

Measures figures of README.md's Figures table; with no FIGURE, all of them.

Figures (output file under OUT_DIR):
  run          `tessera run` decode on stories260K, 1 and 2 threads   stories260k_run_decode.json
  coordinator  coordinator step overhead, tp 1/2/4, stories260K       coordinator_overhead_stories260k.json
  scheduler    scheduler_bench, 1,024 running decode sequences        scheduler_step.json
  rss          worker VmRSS, tp 2, llama-1b BF16, 32 MB KV/worker     worker_rss_llama1b_tp2.json
  kernel       kernel_bench: BF16 GEMM GB/s, GFLOP/s, VDPBF16PS peak  kernel_bench_gemm.json

Environment (defaults in brackets; relative paths are from the repository root):
  BUILD_DIR            build tree with bin/ [build]
  TESSERA_STORIES_DIR  stories260K model folder [../shared/models/stories260K]
  LLAMA1B_DIR          generated llama-1b BF16 folder, made if missing (~2.5 GB)
                       [/tmp/tessera-llama-1b-bf16, as benchmarks/report/run_sweep.sh]
  OUT_DIR              where the JSON files go [benchmarks/results]
  REPEATS              samples per setting [5]
  TPS                  tensor-parallel sizes of the coordinator figure ["1 2 4"]
  GEMM_FILTER          kernel_bench filter of the GEMM figure: BF16 at the 1B shapes, m = 1 and 128, both paths
                       [^BM_(Gemm/m:(1|128)/N:[0-9]+/K:[0-9]+/dtype:2/|Bf16DotPeak)]
  TESSERA_BENCH_THREADS  kernel_bench threads [every core]

Progress goes to stderr. Take figures on a quiet machine: the JSON records the load average
before and after, so a busy run can be told apart.
EOF
}

cd "$(dirname "$0")/.."
REPO=$PWD
BUILD_DIR=${BUILD_DIR:-build}
STORIES=${TESSERA_STORIES_DIR:-../shared/models/stories260K}
LLAMA1B_DIR=${LLAMA1B_DIR:-/tmp/tessera-llama-1b-bf16}
OUT_DIR=${OUT_DIR:-benchmarks/results}
REPEATS=${REPEATS:-5}
TPS=${TPS:-"1 2 4"}
GEMM_FILTER=${GEMM_FILTER:-'^BM_(Gemm/m:(1|128)/N:[0-9]+/K:[0-9]+/dtype:2/|Bf16DotPeak)'}
BIN=$BUILD_DIR/bin
HELPER=(python3 "$REPO/benchmarks/readme_figures.py")
CORES=$(nproc)
PROMPT="Once upon a time"  # The prompt of stories260K's reference continuation.
ALL_FIGURES=(run coordinator scheduler rss kernel)

FIGURES=()
for arg in "$@"; do
  case $arg in
    -h|--help) usage; exit 0 ;;
    run|coordinator|scheduler|rss|kernel) FIGURES+=("$arg") ;;
    *) echo "readme_figures: unknown figure '$arg' (run --help)" >&2; exit 2 ;;
  esac
done
((${#FIGURES[@]})) || FIGURES=("${ALL_FIGURES[@]}")

log() { printf '[readme_figures %4ds] %s\n' "$SECONDS" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Google Benchmark binaries are not copied to bin/ in every configuration.
find_bin() {
  local name=$1 subdir=$2
  for candidate in "$BIN/$name" "$BUILD_DIR/benchmarks/$subdir/$name"; do
    [[ -x $candidate ]] && { echo "$candidate"; return; }
  done
  die "$name not found in $BIN or $BUILD_DIR/benchmarks/$subdir; build it: ninja -C $BUILD_DIR $name"
}
need_bin() { [[ -x $BIN/$1 ]] || die "$BIN/$1 is missing; build it first (ninja -C $BUILD_DIR $1)"; }
need_stories() {
  [[ -f $STORIES/model.safetensors ]] ||
    die "stories260K not found at $STORIES (set TESSERA_STORIES_DIR)"
}

WORK=$(mktemp -d /tmp/tessera-readme-figures.XXXXXX)
FIG_DIR=''  # The work folder of the figure being measured.

# Each figure's folder collects what the helper turns into JSON: dates, load averages, the
# commands that ran and one JSON line per raw sample.
begin_figure() {
  FIG_DIR=$WORK/$1
  mkdir -p "$FIG_DIR"
  date -u +%Y-%m-%dT%H:%M:%SZ > "$FIG_DIR/date_utc"
  cat /proc/loadavg > "$FIG_DIR/loadavg_before"
  log "$1: started (load average $(cut -d' ' -f1-3 /proc/loadavg))"
}
end_figure() {  # FIGURE OUT_FILE KEY=VALUE...
  local fig=$1 out=$2
  shift 2
  cat /proc/loadavg > "$FIG_DIR/loadavg_after"
  date -u +%Y-%m-%dT%H:%M:%SZ > "$FIG_DIR/finished_utc"
  "${HELPER[@]}" write "$fig" "$FIG_DIR" "$OUT_DIR/$out" build_dir="$BUILD_DIR" "$@"
  log "$fig: wrote $OUT_DIR/$out"
}
# Appends a command, shell-quoted, to the figure's command list (the JSON lists each once).
record() { { printf '%q ' "$@"; echo; } | sed 's/ $//' >> "$FIG_DIR/commands.txt"; }
recorded() { record "$@"; "$@"; }
sample() { echo "$1" >> "$FIG_DIR/samples.jsonl"; }

# ---------------------------------------------------------------------------- tessera serve

SERVE_PID='' SERVE_API='' SERVE_METRICS='' SERVE_WORKER_PORTS=() SERVE_WORKER_PIDS=()

# start_serve MODEL TP THREADS KV_MB READY_TIMEOUT_S LOG: tessera serve on loopback ports,
# back once /readyz says a replica has stepped (every rank loaded and warmed up).
start_serve() {
  local model=$1 tp=$2 threads=$3 kv_mb=$4 timeout=$5 logfile=$6
  # --port P, --cluster-port P+1, --metrics-port P+2, worker i's metrics P+3+i.
  local base
  base=$("${HELPER[@]}" ports $((tp + 3)))
  SERVE_API=$base SERVE_METRICS=$((base + 2)) SERVE_WORKER_PORTS=()
  for ((i = 0; i < tp; i++)); do SERVE_WORKER_PORTS+=($((base + 3 + i))); done
  local cmd=("$BIN/tessera" serve --model "$model" --tp "$tp" --threads "$threads"
             --kv-memory-mb "$kv_mb" --host 127.0.0.1 --port "$base" --cluster-port $((base + 1))
             --metrics-port "$SERVE_METRICS" --http-port 0 --insecure)
  record "${cmd[@]}"
  "${cmd[@]}" > "$logfile" 2>&1 &
  SERVE_PID=$!
  local deadline=$((SECONDS + timeout))
  until "${HELPER[@]}" ready "$SERVE_METRICS"; do
    kill -0 "$SERVE_PID" 2>/dev/null || die "tessera serve exited before it was ready; see $logfile"
    ((SECONDS < deadline)) || die "tessera serve not ready after ${timeout}s; see $logfile"
    sleep 0.5
  done
  mapfile -t SERVE_WORKER_PIDS < <(pgrep -P "$SERVE_PID" -x tessera-worker || true)
}

# serve stops its coordinator and workers on SIGTERM; workers it failed to stop are ended by
# the ids recorded at start.
stop_serve() {
  [[ -n $SERVE_PID ]] || return 0
  if kill -0 "$SERVE_PID" 2>/dev/null; then
    kill -TERM "$SERVE_PID"
    wait "$SERVE_PID" 2>/dev/null || true
  fi
  for pid in "${SERVE_WORKER_PIDS[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  SERVE_PID='' SERVE_WORKER_PIDS=()
}

cleanup() {
  local rc=$?
  stop_serve
  if ((rc == 0)); then
    rm -rf "$WORK"
  else
    log "failed; logs and raw samples kept in $WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------- figures

# 200 greedy tokens from the reference prompt; the JSON line of `tessera run --json`.
run_stories() {  # THREADS
  recorded "$BIN/tessera" run --model "$STORIES" --prompt "$PROMPT" --max-tokens 200 --temperature 0 \
    --ignore-eos --threads "$1" --json --quiet
}

figure_run() {
  need_bin tessera; need_stories
  begin_figure run
  local out
  for threads in 1 2; do
    for ((rep = 1; rep <= REPEATS; rep++)); do
      out=$(run_stories "$threads")
      sample "{\"threads\": $threads, \"rep\": $rep, \"output\": $out}"
      log "run: $threads thread(s), sample $rep/$REPEATS: $(grep -o '"decode_tokens_per_second":[0-9.]*' <<<"$out" | cut -d: -f2 | xargs printf %.0f) tok/s"
    done
  done
  end_figure run stories260k_run_decode.json model="$STORIES" prompt="$PROMPT" max_tokens=200 \
    temperature=0 ignore_eos=true repeats="$REPEATS"
}

# One request on the running server with rank 0's /metrics read before and after, so its
# forward time can be subtracted from the coordinator's step time.
measured_request() {  # KIND TP THREADS REP MAX_TOKENS
  local before after out
  before=$(recorded "${HELPER[@]}" rank0-forward "${SERVE_WORKER_PORTS[@]}")
  out=$(recorded "$BIN/tessera" generate --server "127.0.0.1:$SERVE_API" --prompt "$PROMPT" \
    --max-tokens "$5" --temperature 0 --ignore-eos --json)
  after=$(recorded "${HELPER[@]}" rank0-forward "${SERVE_WORKER_PORTS[@]}")
  sample "{\"kind\": \"$1\", \"tp\": $2, \"threads\": $3, \"rep\": $4, \"generate\": $out, \"rank0_before\": $before, \"rank0_after\": $after}"
}

figure_coordinator() {
  need_bin tessera; need_bin tessera-coordinator; need_bin tessera-worker; need_stories
  begin_figure coordinator
  for tp in $TPS; do
    # The threads `tessera serve` gives each worker by default, passed explicitly so that the
    # `tessera run` reference runs with the same.
    local threads=$((CORES / tp)); ((threads >= 1)) || threads=1
    log "coordinator: tp $tp, $threads thread(s) per worker: tessera run reference"
    local out
    for ((rep = 1; rep <= REPEATS; rep++)); do
      out=$(run_stories "$threads")
      sample "{\"kind\": \"run\", \"tp\": $tp, \"threads\": $threads, \"rep\": $rep, \"output\": $out}"
    done
    log "coordinator: tp $tp: starting tessera serve"
    start_serve "$STORIES" "$tp" "$threads" 64 120 "$WORK/serve_stories_tp$tp.log"
    measured_request warmup "$tp" "$threads" 0 200
    for ((rep = 1; rep <= REPEATS; rep++)); do
      measured_request prefill_probe "$tp" "$threads" "$rep" 1
      measured_request decode "$tp" "$threads" "$rep" 200
    done
    stop_serve
    log "coordinator: tp $tp done"
  done
  end_figure coordinator coordinator_overhead_stories260k.json model="$STORIES" prompt="$PROMPT" \
    max_tokens=200 temperature=0 ignore_eos=true tps="$TPS" kv_memory_mb=64 repeats="$REPEATS"
}

figure_scheduler() {
  local bench
  bench=$(find_bin scheduler_bench scheduler)
  begin_figure scheduler
  # Each repetition is 2,000 timed steps; both prefix-cache settings of the 1,024 case.
  recorded "$bench" '--benchmark_filter=^BM_DecodeStep/seqs:1024/' \
    "--benchmark_repetitions=$REPEATS" --benchmark_report_aggregates_only=false \
    "--benchmark_out=$FIG_DIR/benchmark.json" --benchmark_out_format=json >&2
  end_figure scheduler scheduler_step.json repeats="$REPEATS"
}

figure_kernel() {
  local bench
  bench=$(find_bin kernel_bench kernels)
  begin_figure kernel
  # By default every batch-64 BF16 (dtype 2) shape kernel_bench has, at any SIMD level it
  # forces; `env` puts TESSERA_BENCH_THREADS, when set, into the recorded command.
  recorded env ${TESSERA_BENCH_THREADS:+TESSERA_BENCH_THREADS=$TESSERA_BENCH_THREADS} "$bench" \
    "--benchmark_filter=$GEMM_FILTER" \
    "--benchmark_repetitions=$REPEATS" --benchmark_report_aggregates_only=false \
    "--benchmark_out=$FIG_DIR/benchmark.json" --benchmark_out_format=json >&2
  end_figure kernel kernel_bench_gemm.json repeats="$REPEATS" filter="$GEMM_FILTER" \
    tessera_bench_threads="${TESSERA_BENCH_THREADS:-all cores}"
}

figure_rss() {
  need_bin tessera; need_bin tessera-coordinator; need_bin tessera-worker
  begin_figure rss
  local generated=false
  if [[ ! -f $LLAMA1B_DIR/model.safetensors ]]; then
    log "rss: generating llama-1b BF16 into $LLAMA1B_DIR (~2.5 GB, a minute or two)"
    recorded "$BIN/tessera" gen-checkpoint --preset llama-1b --dtype bf16 --out "$LLAMA1B_DIR" >&2
    generated=true
  fi
  local threads=$((CORES / 2)); ((threads >= 1)) || threads=1
  log "rss: starting tessera serve --tp 2 on llama-1b (loading takes a while)"
  local t0=$SECONDS
  start_serve "$LLAMA1B_DIR" 2 "$threads" 32 900 "$WORK/serve_llama1b_tp2.log"
  local ready_s=$((SECONDS - t0))
  log "rss: ready after ${ready_s}s; reading VmRSS"
  local workers
  for ((i = 1; i <= 3; i++)); do
    sleep 2
    workers=$(recorded "${HELPER[@]}" worker-memory "$SERVE_PID")
    sample "{\"reading\": $i, \"seconds_after_ready\": $((SECONDS - t0 - ready_s)), \"workers\": $workers}"
  done
  stop_serve
  end_figure rss worker_rss_llama1b_tp2.json model="$LLAMA1B_DIR" \
    model_bytes="$(stat -c %s "$LLAMA1B_DIR/model.safetensors")" model_generated_now=$generated \
    tp=2 threads_per_worker="$threads" kv_memory_mb=32 seconds_to_ready="$ready_s"
}

mkdir -p "$OUT_DIR"
log "figures: ${FIGURES[*]}; build $BUILD_DIR; results to $OUT_DIR; work in $WORK"
for fig in "${FIGURES[@]}"; do "figure_$fig"; done
log "done"
