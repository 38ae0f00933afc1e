#!/usr/bin/env bash
# GPU serving benchmark (issue 34): writes a Llama-3.1-8B-shaped BF16 checkpoint with random
# weights (`tessera gen-checkpoint`, so nothing large is carried to the device), serves it
# with `tessera serve --device cuda --tp 1`, and runs tessera-bench (random token prompts,
# ignore_eos, all requests at once under a concurrency cap) over a grid of input/output
# lengths and concurrencies: BF16 weights and KV cache, then FP8 weights with an FP8 KV
# cache. Around each point it scrapes the workers' /metrics for the share of decode forward
# passes that replayed a CUDA graph. benchmarks/gpu/serve_bench_summary.py merges the points
# into <out-stem>.json and a Markdown table (<out-stem>.md) beside the anchors and targets.
#
# Everything is held to a time budget: a point whose estimated time (calibrated on the
# points measured so far) does not fit what is left, less what the later phase needs, is
# skipped and recorded as skipped with the numbers; each point also runs under a timeout
# of what is left. The server is always stopped on exit, error, Ctrl-C or timeout.
#
# Usage: benchmarks/gpu/serve_bench.sh [--device cuda|cpu] [--budget S] [--bin-dir DIR]
#          [--model-dir DIR] [--delete-model] [--gen-only] [--plan] [--out-stem PATH] [--help]
#
# Flags (each also an environment variable):
#   --device D        SERVE_BENCH_DEVICE  cuda (default) or cpu; cpu switches every default
#                     below to a tiny model and grid (the orchestration's own test)
#   --budget S        SERVE_BENCH_BUDGET  seconds for the whole run (cuda 300, cpu 120)
#   --bin-dir DIR     SERVE_BENCH_BIN_DIR where tessera and tessera-bench are (build/bin)
#   --model-dir DIR   SERVE_BENCH_MODEL_DIR  the checkpoint: reused when an earlier run of
#                     this script completed it there, else generated there (default: a new
#                     temporary folder, deleted at the end)
#   --delete-model    SERVE_BENCH_DELETE_MODEL=1  delete --model-dir at the end
#   --gen-only        only write the checkpoint (run_gpu_check.sh does this in the background
#                     while the GPU tests run)
#   --plan            print the points with their requests and first estimates, run nothing
#   --out-stem PATH   SERVE_BENCH_OUT_STEM  results PATH.json and PATH.md (default
#                     $SERVE_BENCH_OUT_DIR/<prefix>-<UTC stamp>; OUT_DIR benchmarks/results,
#                     prefix gpu_serving, cpu_serving on the CPU)
# Environment only:
#   SERVE_BENCH_SHAPES       BF16 points, "IN/OUT:PER_SLOT:MIN:WARMUP ...": requests =
#                            max(MIN, concurrency x PER_SLOT), warm-up = min(WARMUP,
#                            concurrency) requests of the same shape (not counted)
#                            (cuda "128/128:2:4:4 1024/128:1:4:2 2048/2048:1:1:0")
#   SERVE_BENCH_CONCURRENCY  BF16 concurrencies (cuda "1 16 64 256")
#   SERVE_BENCH_FP8_SHAPES   FP8 points, same form ("128/128:2:4:4 1024/128:1:4:2"; empty: none)
#   SERVE_BENCH_FP8_CONCURRENCY  (default: SERVE_BENCH_CONCURRENCY)
#   SERVE_BENCH_FP8_ARGS     serve flags of the FP8 phase ("--quantization fp8 --kv-cache-dtype fp8")
#   SERVE_BENCH_GEN_ARGS     gen-checkpoint flags (cuda "--preset llama3.1-8b --dtype bf16")
#   SERVE_BENCH_TP           tensor-parallel ranks (1)
#   SERVE_BENCH_GPU_MEMORY_UTILIZATION  serve's --gpu-memory-utilization (cuda 0.90), passed
#                            only where `tessera serve --help` lists the flag
#   SERVE_BENCH_KV_MEMORY_MB serve's --kv-memory-mb (cpu 256; cuda unset)
#   SERVE_BENCH_SERVE_ARGS   more serve flags for both phases, e.g. "--max-num-seqs 512"
#   SERVE_BENCH_START_TIMEOUT  seconds a server may take to load and report ready (cuda 240)
#   SERVE_BENCH_STOP_TIMEOUT   seconds it may take to drain on SIGTERM before a second
#                            SIGTERM and then SIGKILL (20)
#   SERVE_BENCH_EST_START_S  a server start's estimate until one is measured (cuda 60)
#   SERVE_BENCH_EST_ARGS     the estimator's model (serve_bench_helper.py estimate --help)
#   SERVE_BENCH_COMMIT       the binaries' commit (default: this checkout's)
#   SERVE_BENCH_WORK_DIR     per-point JSON, /metrics pages and logs (default: a new temp folder)
#   OUT                      when set (the device tool sets it), results and logs are copied there
#
# Exit status: 0 every point ran or was skipped for the budget; 1 a point or a server failed;
# 2 bad usage or missing binaries; 3 the checkpoint could not be written.
#
# Time on one H200, estimated from gpu_bench (the serving part has not run there yet): the
# 16 GB checkpoint ~40 s (gen-checkpoint is one thread: 2.5 GB took 6.1 s on a 2-core EPYC
# VM; run_gpu_check.sh hides it behind the tests), each server start ~30-60 s (load, FP8
# quantization, CUDA graph capture), 128/128 points 3-15 s, 1,024/128 3-25 s, 2,048/2,048
# ~10 s at concurrency 1 to ~45 s at 64; 2,048/2,048 at 256 (~130 s, and its KV does not
# fit) is what the default budget skips. `--plan` prints the first estimates.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
HELPER=benchmarks/gpu/serve_bench_helper.py
SUMMARY=benchmarks/gpu/serve_bench_summary.py

usage() { sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { printf 'serve-bench: %s\n' "$1" >&2; exit "${2:-2}"; }

DEVICE=${SERVE_BENCH_DEVICE:-cuda}
BUDGET=${SERVE_BENCH_BUDGET:-}
BIN_DIR=${SERVE_BENCH_BIN_DIR:-build/bin}
MODEL_DIR=${SERVE_BENCH_MODEL_DIR:-}
DELETE_MODEL=${SERVE_BENCH_DELETE_MODEL:-}
OUT_STEM=${SERVE_BENCH_OUT_STEM:-}
GEN_ONLY=0
PLAN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=${2:?--device needs a value}; shift 2 ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift 2 ;;
    --bin-dir) BIN_DIR=${2:?--bin-dir needs a folder}; shift 2 ;;
    --model-dir) MODEL_DIR=${2:?--model-dir needs a folder}; shift 2 ;;
    --delete-model) DELETE_MODEL=1; shift ;;
    --gen-only) GEN_ONLY=1; shift ;;
    --plan) PLAN=1; shift ;;
    --out-stem) OUT_STEM=${2:?--out-stem needs a path}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (--help lists them)" ;;
  esac
done

case "$DEVICE" in
  cuda)
    BUDGET=${BUDGET:-300}
    GEN_ARGS=${SERVE_BENCH_GEN_ARGS:-"--preset llama3.1-8b --dtype bf16"}
    SHAPES=${SERVE_BENCH_SHAPES-"128/128:2:4:4 1024/128:1:4:2 2048/2048:1:1:0"}
    CONCURRENCY=${SERVE_BENCH_CONCURRENCY:-"1 16 64 256"}
    FP8_SHAPES=${SERVE_BENCH_FP8_SHAPES-"128/128:2:4:4 1024/128:1:4:2"}
    GPU_MEM=${SERVE_BENCH_GPU_MEMORY_UTILIZATION:-0.90}
    KV_MB=${SERVE_BENCH_KV_MEMORY_MB:-}
    START_TIMEOUT=${SERVE_BENCH_START_TIMEOUT:-240}
    EST_START=${SERVE_BENCH_EST_START_S:-60}
    PREFIX=gpu_serving ;;
  cpu)
    # A 16 M-parameter Llama 3.1 (its real vocabulary, 2 layers 64 wide): seconds per point.
    BUDGET=${BUDGET:-120}
    GEN_ARGS=${SERVE_BENCH_GEN_ARGS:-"--preset llama3.1-8b --layers 2 --hidden 64 --intermediate 128 --heads 4 --kv-heads 2 --head-dim 16"}
    SHAPES=${SERVE_BENCH_SHAPES-"16/8:2:4:1"}
    CONCURRENCY=${SERVE_BENCH_CONCURRENCY:-"1 4"}
    FP8_SHAPES=${SERVE_BENCH_FP8_SHAPES-"16/8:2:4:1"}
    SERVE_BENCH_FP8_CONCURRENCY=${SERVE_BENCH_FP8_CONCURRENCY:-4}
    GPU_MEM=
    KV_MB=${SERVE_BENCH_KV_MEMORY_MB:-256}
    START_TIMEOUT=${SERVE_BENCH_START_TIMEOUT:-60}
    EST_START=${SERVE_BENCH_EST_START_S:-10}
    PREFIX=cpu_serving ;;
  *) die "--device must be cuda or cpu, not '$DEVICE'" ;;
esac
FP8_CONCURRENCY=${SERVE_BENCH_FP8_CONCURRENCY:-$CONCURRENCY}
FP8_ARGS=${SERVE_BENCH_FP8_ARGS:-"--quantization fp8 --kv-cache-dtype fp8"}
TP=${SERVE_BENCH_TP:-1}
STOP_TIMEOUT=${SERVE_BENCH_STOP_TIMEOUT:-20}
# shellcheck disable=SC2206
EST_ARGS=(${SERVE_BENCH_EST_ARGS:-})
STAMP=$(date -u +%Y%m%d-%H%M%S)
OUT_STEM=${OUT_STEM:-${SERVE_BENCH_OUT_DIR:-benchmarks/results}/$PREFIX-$STAMP}
[[ $BUDGET =~ ^[0-9]+$ ]] || die "the budget must be whole seconds, not '$BUDGET'"
[[ $TP =~ ^[1-9][0-9]*$ ]] || die "SERVE_BENCH_TP must be a positive integer, not '$TP'"
for spec in $SHAPES $FP8_SHAPES; do
  [[ $spec =~ ^[0-9]+/[0-9]+:[0-9]+:[0-9]+:[0-9]+$ ]] ||
    die "a shape is IN/OUT:PER_SLOT:MIN:WARMUP (e.g. 128/128:2:4:4), not '$spec'"
done
for c in $CONCURRENCY $FP8_CONCURRENCY; do
  [[ $c =~ ^[1-9][0-9]*$ ]] || die "concurrencies are positive integers, not '$c'"
done

START=$(date +%s)
elapsed() { echo $(($(date +%s) - START)); }
say() { printf '[serve-bench %4ss] %s\n' "$(elapsed)" "$*"; }

# ---- Points. "IN/OUT:PER_SLOT:MIN:WARMUP" x concurrencies -> "in,out,c,n,warmup" lines.
expand() {
  local spec c io rest in out per min warm n w
  for spec in $1; do
    io=${spec%%:*} rest=${spec#*:}
    in=${io%/*} out=${io#*/}
    per=${rest%%:*} rest=${rest#*:}
    min=${rest%%:*} warm=${rest#*:}
    for c in $2; do
      n=$((c * per)); [ "$n" -lt "$min" ] && n=$min
      [ "$n" -lt 1 ] && n=1
      w=$((warm < c ? warm : c))
      echo "$in,$out,$c,$n,$w"
    done
  done
}
estimate() { python3 "$HELPER" estimate "$WORK" "$@" "${EST_ARGS[@]}"; }
# Phases: BF16 (the checkpoint's weights, KV "auto" = BF16), then FP8 weights + FP8 KV.
PHASES=(bf16 fp8)
phase_points() {
  case "$1" in
    bf16) expand "$SHAPES" "$CONCURRENCY" ;;
    fp8) expand "$FP8_SHAPES" "$FP8_CONCURRENCY" ;;
  esac
}
phase_args() { [ "$1" = fp8 ] && echo "$FP8_ARGS"; }

if [ "$PLAN" = 1 ]; then
  command -v python3 >/dev/null 2>&1 || die "python3 is not on PATH (the estimator needs it)"
  WORK=$(mktemp -d) || die "cannot create a temporary folder"
  total=0
  for phase in "${PHASES[@]}"; do
    while IFS=, read -r in out c n w; do
      est=$(estimate "$in,$out,$c,$n,$w")
      total=$((total + est))
      printf '%-5s %5s/%-5s c=%-4s %5s requests (+%s warm-up)  ~%ss\n' "$phase" "$in" "$out" "$c" "$n" "$w" "$est"
    done < <(phase_points "$phase")
  done
  rmdir "$WORK"
  echo "~${total}s of points by the uncalibrated estimate (cuda: an H200's gpu_bench figures), plus two server starts (~${EST_START}s each); budget ${BUDGET}s"
  exit 0
fi

command -v python3 >/dev/null 2>&1 || die "python3 is not on PATH (the helper and the summary need it)"
for b in tessera tessera-bench; do
  [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b is missing or not executable; build it (scripts/build.sh) or pass --bin-dir"
done
TESSERA=$BIN_DIR/tessera
BENCH=$BIN_DIR/tessera-bench

# ---- The checkpoint. A marker file says an earlier run finished writing it.
if [ -z "$MODEL_DIR" ]; then
  MODEL_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tessera-serve-bench-model.XXXXXX") || die "cannot create a temporary folder" 3
  DELETE_MODEL=${DELETE_MODEL:-1}
fi
DELETE_MODEL=${DELETE_MODEL:-0}
MARKER=$MODEL_DIR/.serve-bench-complete

SERVE_PID=
CHILD_PID=
GEN_PID=
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local rc=$?
  # A second signal (the backstop timeout's, a second Ctrl-C) must not cut the cleanup short.
  trap - EXIT
  trap '' INT TERM
  for pid in "$CHILD_PID" "$GEN_PID"; do
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null
  done
  [ -n "$SERVE_PID" ] && stop_server 5
  if [ "$DELETE_MODEL" = 1 ] && [ -d "$MODEL_DIR" ]; then
    rm -rf "$MODEL_DIR" && say "deleted the checkpoint $MODEL_DIR"
  fi
  exit "$rc"
}
trap cleanup EXIT
# A signal ends the run; the EXIT trap then stops whatever is running.
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated (a timeout?)"; exit 143' TERM

GEN_S=0
if [ -f "$MARKER" ]; then
  say "checkpoint: $MODEL_DIR (written earlier: $(cat "$MARKER"))"
  GEN_S=$(sed -n '1s/^\([0-9]*\)s,.*/\1/p' "$MARKER")
else
  mkdir -p "$MODEL_DIR" || die "cannot create $MODEL_DIR" 3
  say "writing the checkpoint ($GEN_ARGS) into $MODEL_DIR ($(df -Ph "$MODEL_DIR" | awk 'NR == 2 {print $4}') free there)"
  gen_start=$(date +%s)
  # Backgrounded and waited for, so a signal is handled at once (bash defers traps while a
  # foreground command runs).
  # shellcheck disable=SC2086
  timeout "$BUDGET" "$TESSERA" gen-checkpoint $GEN_ARGS --out "$MODEL_DIR" >"$MODEL_DIR/gen-checkpoint.log" 2>&1 &
  GEN_PID=$!
  wait "$GEN_PID"
  gen_rc=$?
  GEN_PID=
  GEN_S=$(($(date +%s) - gen_start))
  if [ "$gen_rc" -ne 0 ]; then
    tail -5 "$MODEL_DIR/gen-checkpoint.log" >&2
    die "gen-checkpoint failed (exit $gen_rc$([ "$gen_rc" -eq 124 ] && echo ", over the ${BUDGET}s budget")) after ${GEN_S}s; $(df -Ph "$MODEL_DIR" | awk 'NR == 2 {print $4}') free in $MODEL_DIR" 3
  fi
  echo "${GEN_S}s, $(date -u +%Y-%m-%dT%H:%M:%SZ), $GEN_ARGS" >"$MARKER"
  say "checkpoint written in ${GEN_S}s: $(grep -o 'wrote .*' "$MODEL_DIR/gen-checkpoint.log" | tail -1), $(du -sh "$MODEL_DIR" | cut -f1)"
fi
if [ "$GEN_ONLY" = 1 ]; then
  DELETE_MODEL=0
  say "the checkpoint stays in $MODEL_DIR"
  exit 0
fi

WORK=${SERVE_BENCH_WORK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/tessera-serve-bench.XXXXXX")}
mkdir -p "$WORK" || die "cannot create $WORK"
rm -f "$WORK"/point-*.json "$WORK"/phase-*.json
cp "$MODEL_DIR/config.json" "$WORK/model_config.json"
say "work folder $WORK; budget ${BUDGET}s; results -> $OUT_STEM.{json,md}"

have_gpu_mem_flag=0
"$TESSERA" serve --help 2>/dev/null | grep -q -- '--gpu-memory-utilization' && have_gpu_mem_flag=1

# ---- The server.
API_PORT='' METRICS_PORT=''
server_alive() { [ -n "$SERVE_PID" ] && kill -0 "$SERVE_PID" 2>/dev/null; }
# Waits up to $1 s for serve to drain and stop; a second SIGTERM cuts the drain short, then
# SIGKILL (serve's children get SIGKILL when it dies).
stop_server() {
  local limit=${1:-$STOP_TIMEOUT} t0 i
  server_alive || { SERVE_PID=; STOP_S=0; return 0; }
  t0=$(date +%s)
  kill -TERM "$SERVE_PID" 2>/dev/null
  for ((i = 0; i < limit * 10; i++)); do server_alive || break; sleep 0.1; done
  if server_alive; then
    say "the server is still draining after ${limit}s; a second SIGTERM"
    kill -TERM "$SERVE_PID" 2>/dev/null
    for ((i = 0; i < 50; i++)); do server_alive || break; sleep 0.1; done
    server_alive && { say "SIGKILL to the server"; kill -KILL "$SERVE_PID" 2>/dev/null; }
  fi
  wait "$SERVE_PID" 2>/dev/null
  SERVE_PID=
  STOP_S=$(($(date +%s) - t0))
}

# Starts serve for phase $1 with extra flags $2; returns 0 once it reports ready.
start_server() {
  local phase=$1 extra=$2 limit=$3 base t0 rc
  base=$(python3 "$HELPER" free-ports $((3 + TP))) || return 1
  API_PORT=$base
  METRICS_PORT=$((base + 2))  # base + 1 is the cluster port (serve's default: port + 1)
  SERVE_CMD=("$TESSERA" serve --model "$MODEL_DIR" --device "$DEVICE" --tp "$TP"
             --port "$API_PORT" --metrics-port "$METRICS_PORT" --http-port 0
             # Loopback only: plaintext, as the peers' benchmarks measure their HTTP APIs.
             --insecure)
  [ -n "$KV_MB" ] && SERVE_CMD+=(--kv-memory-mb "$KV_MB")
  [ -n "$GPU_MEM" ] && [ "$have_gpu_mem_flag" = 1 ] && SERVE_CMD+=(--gpu-memory-utilization "$GPU_MEM")
  # shellcheck disable=SC2206
  SERVE_CMD+=($extra ${SERVE_BENCH_SERVE_ARGS:-})
  say "$phase: starting ${SERVE_CMD[*]#"$BIN_DIR/"}"
  t0=$(date +%s)
  "${SERVE_CMD[@]}" >"$WORK/serve-$phase.log" 2>&1 &
  SERVE_PID=$!
  python3 "$HELPER" wait-ready "http://127.0.0.1:$METRICS_PORT/readyz" "$SERVE_PID" "$limit" &
  CHILD_PID=$!
  wait "$CHILD_PID"
  rc=$?
  CHILD_PID=
  START_S=$(($(date +%s) - t0))
  if [ "$rc" -ne 0 ]; then
    START_FAIL="$([ "$rc" -eq 1 ] && echo "exited during start-up" || echo "not ready after ${limit}s"): $(grep -v '^\s*$' "$WORK/serve-$phase.log" | tail -2 | tr '\n' ' ' | cut -c1-400)"
    stop_server 5
    return 1
  fi
  python3 "$HELPER" scrape "http://127.0.0.1:$METRICS_PORT/metrics" "$WORK/phase-$phase.coordinator.prom"
  python3 "$HELPER" phase --phase "$phase" --out "$WORK/phase-$phase.json" --status ok \
    --start-s "$START_S" --serve-args="${SERVE_CMD[*]}" --serve-log "$WORK/serve-$phase.log" \
    --coordinator-metrics "$WORK/phase-$phase.coordinator.prom" --print-line |
    while read -r line; do say "$line"; done
  return 0
}

scrape_all() {  # $1: file prefix. The coordinator, then worker i on METRICS_PORT + 1 + i.
  local i
  python3 "$HELPER" scrape "http://127.0.0.1:$METRICS_PORT/metrics" "$1.coordinator.prom"
  for ((i = 0; i < TP; i++)); do
    python3 "$HELPER" scrape "http://127.0.0.1:$((METRICS_PORT + 1 + i))/metrics" "$1.worker$i.prom"
  done
}
worker_files() { local i; for ((i = 0; i < TP; i++)); do echo "$1.worker$i.prom"; done; }


POINT_INDEX=0
FAILURES=0
record() {  # phase point status reason [bench args...]
  local phase=$1 point=$2 status=$3 reason=$4; shift 4
  local in out c n w
  IFS=, read -r in out c n w <<<"$point"
  python3 "$HELPER" record --phase "$phase" --input-len "$in" --output-len "$out" \
    --concurrency "$c" --num-requests "$n" --warmup "$w" --status "$status" --reason="$reason" \
    --out "$WORK/$(printf 'point-%03d' "$POINT_INDEX")-$phase-${in}x${out}-c$c.json" "$@" |
    while read -r line; do say "$line"; done
  local rc=$?
  POINT_INDEX=$((POINT_INDEX + 1))
  return "$rc"
}

# Runs one point under what is left of the budget less $3 s (kept for later work).
run_point() {
  local phase=$1 point=$2 keep=$3 in out c n w est left id t0 rc wall status reason
  IFS=, read -r in out c n w <<<"$point"
  if ! server_alive; then
    record "$phase" "$point" skipped "the $phase server exited (see serve-$phase.log)"
    FAILURES=$((FAILURES + 1))
    return
  fi
  est=$(estimate "$point")
  left=$((BUDGET - $(elapsed) - keep))
  if [ "$est" -gt "$left" ]; then
    record "$phase" "$point" skipped "needs ~${est}s by estimate, ${left}s of the budget left (${keep}s kept for what follows)" \
      --estimate-s "$est"
    return
  fi
  id=$WORK/$phase-${in}x${out}-c$c
  scrape_all "$id.before"
  t0=$(date +%s.%N)
  # -k: tessera-bench gets SIGKILL 5 s after SIGTERM; waited for in the background so a
  # signal to this script is handled at once.
  timeout -k 5 "$left" "$BENCH" --address "127.0.0.1:$API_PORT" --workload fixed \
    --input-len "$in" --output-len "$out" --max-concurrency "$c" --num-requests "$n" \
    --warmup "$w" --request-rate 0 --timeout-s "$left" --wait-ready-s 10 --no-progress \
    --label "serve_bench $phase $in/$out c$c" --out "$id.json" >"$id.log" 2>&1 &
  CHILD_PID=$!
  wait "$CHILD_PID"
  rc=$?
  CHILD_PID=
  wall=$(python3 -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 2))" "$t0")
  status=ok reason=
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    status=timed_out reason="ran past the ${left}s left of the budget"
    rm -f "$id.json"
  elif [ "$rc" -ne 0 ]; then
    status=failed reason="tessera-bench exit $rc: $(tail -1 "$id.log" | cut -c1-300)"
  fi
  scrape_all "$id.after"
  # record fails for a point that failed (a failed request counts) or ran out of time.
  # shellcheck disable=SC2046
  record "$phase" "$point" "$status" "$reason" --bench-json "$id.json" --bench-exit "$rc" \
    --estimate-s "$est" --wall-s "$wall" \
    --before-coordinator "$id.before.coordinator.prom" --after-coordinator "$id.after.coordinator.prom" \
    --before-workers $(worker_files "$id.before") --after-workers $(worker_files "$id.after") ||
    FAILURES=$((FAILURES + 1))
}

# ---- The phases in turn. While one runs, time is kept for the next: its start (the last
# measured start, 1.5x for the load-time quantization) and its points.
FINISH_S=$((STOP_TIMEOUT / 2 + 10))  # stopping the last server and writing the summary
STOP_S=0
LAST_START_S=
later_needs() {  # seconds the phases after index $1 need
  local total=0 k pts start
  for ((k = $1 + 1; k < ${#PHASES[@]}; k++)); do
    mapfile -t pts < <(phase_points "${PHASES[$k]}")
    [ ${#pts[@]} -eq 0 ] && continue
    start=$EST_START
    [ -n "$LAST_START_S" ] && start=$((LAST_START_S * 3 / 2 + 5))
    total=$((total + start + (STOP_S > 5 ? STOP_S : 5) + $(estimate "${pts[@]}")))
  done
  echo "$total"
}

for ((p = 0; p < ${#PHASES[@]}; p++)); do
  phase=${PHASES[$p]}
  mapfile -t points < <(phase_points "$phase")
  [ ${#points[@]} -eq 0 ] && continue
  keep=$((FINISH_S + $(later_needs "$p")))
  left=$((BUDGET - $(elapsed) - keep))
  if [ "$left" -lt 10 ]; then
    for pt in "${points[@]}"; do
      record "$phase" "$pt" skipped "no time to start the $phase server: ${left}s of the budget left (${keep}s kept for what follows)"
    done
    continue
  fi
  limit=$((left < START_TIMEOUT ? left : START_TIMEOUT))
  START_FAIL=
  if ! start_server "$phase" "$(phase_args "$phase")" "$limit"; then
    say "$phase: the server FAILED to start after ${START_S}s: $START_FAIL"
    python3 "$HELPER" phase --phase "$phase" --out "$WORK/phase-$phase.json" --status failed \
      --reason="$START_FAIL" --start-s "$START_S" --serve-args="${SERVE_CMD[*]}" --serve-log "$WORK/serve-$phase.log"
    for pt in "${points[@]}"; do record "$phase" "$pt" skipped "the $phase server did not start"; done
    FAILURES=$((FAILURES + 1))
    continue
  fi
  LAST_START_S=$START_S
  for pt in "${points[@]}"; do
    run_point "$phase" "$pt" $((FINISH_S + $(later_needs "$p")))
  done
  stop_server
  say "$phase: server stopped in ${STOP_S}s"
  python3 "$HELPER" phase --phase "$phase" --out "$WORK/phase-$phase.json" --stop-s "$STOP_S"
done

# ---- Results.
mkdir -p "$(dirname "$OUT_STEM")"
checkout_commit() {
  local c
  c=$(git rev-parse --short HEAD 2>/dev/null) || { echo unknown; return; }
  git diff --quiet HEAD -- . ':!benchmarks/results' 2>/dev/null || c+=+dirty
  echo "$c"
}
python3 "$SUMMARY" --work-dir "$WORK" --out-stem "$OUT_STEM" --device "$DEVICE" \
  --commit "${SERVE_BENCH_COMMIT:-$(checkout_commit)}" \
  --gen-args="$GEN_ARGS" --gen-s "$GEN_S" --budget-s "$BUDGET" --elapsed-s "$(elapsed)"
summary_rc=$?
[ "$summary_rc" -ne 0 ] && { say "the summary FAILED (exit $summary_rc)"; FAILURES=$((FAILURES + 1)); }
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  cp "$OUT_STEM.json" "$OUT_STEM.md" "$OUT/" 2>/dev/null
  for f in "$WORK"/serve-*.log; do [ -f "$f" ] && cp "$f" "$OUT/serve_bench-$(basename "$f")"; done
fi
say "done in $(elapsed)s of ${BUDGET}s: $OUT_STEM.json, $OUT_STEM.md; logs in $WORK"
[ "$FAILURES" -eq 0 ] || { say "$FAILURES failure(s): see the lines above"; exit 1; }
exit 0
