#!/usr/bin/env python3
"""benchmarks/gpu/serve_bench.sh end to end on the CPU: a tiny Llama 3.1-shaped checkpoint,
a BF16 and an FP8 phase, points that the budget must skip, the results JSON and Markdown
table; then a run stopped by SIGTERM in the middle of a point, which must leave no server,
no tessera-bench and no checkpoint behind. Exit 77 (skip) when the binaries are missing."""
import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu", "serve_bench.sh")


def fail(message):
    print(f"serve_bench_test: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def check(cond, message):
    if not cond:
        fail(message)


def processes_mentioning(text):
    """Pids whose command line contains `text` (a unique temporary path)."""
    pids = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(cmdline, "rb") as f:
                if text.encode() in f.read():
                    pids.append(int(cmdline.split("/")[2]))
        except OSError:
            pass
    return [p for p in pids if p != os.getpid()]


def check_stopped_cleanly(work, tmp):
    logs = glob.glob(os.path.join(work, "serve-*.log"))
    check(logs, f"no serve log in {work}")
    for log in logs:
        with open(log, errors="replace") as f:
            tail = f.read().rstrip().splitlines()[-1:]
        check(tail == ["tessera serve: stopped"], f"{log} does not end with a clean stop: {tail}")
    left = glob.glob(os.path.join(tmp, "tessera-serve-bench-model.*"))
    check(not left, f"the checkpoint was not deleted: {left}")
    deadline = time.time() + 10  # children reaped just after serve exits
    while processes_mentioning(tmp) and time.time() < deadline:
        time.sleep(0.2)
    check(not processes_mentioning(tmp), f"processes left behind: {processes_mentioning(tmp)}")


def full_run(env, tmp):
    work = os.path.join(tmp, "work")
    stem = os.path.join(tmp, "result")
    run_env = dict(env, SERVE_BENCH_WORK_DIR=work, SERVE_BENCH_BUDGET="150",
                   # 16/120000 cannot fit: its estimate holds a KV read term the calibration
                   # keeps, over 120,000 steps (at least 288 s at concurrency 1).
                   SERVE_BENCH_SHAPES="16/8:2:4:1 16/120000:1:1:0",
                   SERVE_BENCH_CONCURRENCY="1 4",
                   SERVE_BENCH_FP8_SHAPES="16/8:2:4:1", SERVE_BENCH_FP8_CONCURRENCY="4")
    t0 = time.time()
    proc = subprocess.run([SCRIPT, "--device", "cpu", "--out-stem", stem], env=run_env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=280)
    print(proc.stdout)
    print(f"serve_bench_test: the full run took {time.time() - t0:.1f} s")
    check(proc.returncode == 0, f"serve_bench.sh exited {proc.returncode}")

    with open(stem + ".json") as f:
        result = json.load(f)
    with open(stem + ".md") as f:
        md = f.read()
    want = [("bf16", 16, 8, 1), ("bf16", 16, 8, 4), ("bf16", 16, 120000, 1), ("bf16", 16, 120000, 4),
            ("fp8", 16, 8, 4)]
    got = [(p["phase"], p["input_len"], p["output_len"], p["concurrency"]) for p in result["points"]]
    check(got == want, f"points {got}, expected {want}")
    for p in result["points"]:
        name = f"{p['phase']} {p['input_len']}/{p['output_len']} c={p['concurrency']}"
        if p["output_len"] == 120000:
            check(p["status"] == "skipped" and "estimate" in (p["reason"] or ""),
                  f"{name} should be skipped for the budget: {p['status']} {p['reason']}")
            continue
        check(p["status"] == "ok", f"{name}: {p['status']} {p['reason']}")
        m = p["metrics"]
        check(m["completed"] == p["num_requests"] and m["failed"] == 0, f"{name}: {m['completed']} completed")
        check(m["output_token_throughput_tps"] > 0, f"{name}: no output throughput")
        check(m["total_output_tokens"] == p["num_requests"] * p["output_len"], f"{name}: output tokens")
        for key in ("ttft_ms", "tpot_ms", "itl_ms"):
            d = m[key]
            check(d["count"] > 0 and 0 < d["p50"] <= d["p99"], f"{name}: {key} {d}")
        share = p["decode_graph_replay_share"]
        check(share is None or 0 <= share <= 1, f"{name}: graph share {share}")
        cells = [c.strip() for c in next(line for line in md.splitlines()
                                         if line.startswith(f"| {'BF16 / BF16' if p['phase'] == 'bf16' else 'FP8 / FP8'} | "
                                                            f"{p['input_len']} / {p['output_len']} | {p['concurrency']} |")).split("|")]
        check(cells[5] == f"{m['output_token_throughput_tps']:,.0f}", f"{name}: table row {cells}")
        check(cells[9] == ("n/a" if share is None else f"{100 * share:.1f} %"), f"{name}: graph cell {cells[9]}")
    phases = {ph["phase"]: ph for ph in result["phases"]}
    check(phases["bf16"]["config"]["quantization"] == "none" and phases["bf16"]["config"]["kv_cache_dtype"] == "bf16",
          f"bf16 phase config {phases['bf16'].get('config')}")
    check(phases["fp8"]["config"]["quantization"] == "fp8" and phases["fp8"]["config"]["kv_cache_dtype"] == "fp8",
          f"fp8 phase config {phases['fp8'].get('config')}")
    check(result["model"]["config"]["hidden_size"] == 64 and result["commit"], "model and commit recorded")
    check(len(result["targets"]) == 4 and len(result["anchors"]) == 4, "targets and anchors")
    check("| target | goal | measured | result |" in md and "TensorRT-LLM" in md, "the targets and anchors tables")
    check_stopped_cleanly(work, tmp)


def interrupted_run(env, tmp):
    work = os.path.join(tmp, "work-interrupted")
    run_env = dict(env, SERVE_BENCH_WORK_DIR=work, SERVE_BENCH_BUDGET="600",
                   SERVE_BENCH_SHAPES="16/30000:1:1:0", SERVE_BENCH_CONCURRENCY="1",
                   SERVE_BENCH_FP8_SHAPES="")
    proc = subprocess.Popen([SCRIPT, "--device", "cpu", "--out-stem", os.path.join(tmp, "interrupted")],
                            env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started = os.path.join(work, "bf16-16x30000-c1.before.coordinator.prom")
    deadline = time.time() + 120
    while not os.path.exists(started) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    check(os.path.exists(started), "the long point never started")
    time.sleep(2)  # into the measured requests
    t0 = time.time()
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail("serve_bench.sh did not stop within 60 s of SIGTERM")
    print(out)
    print(f"serve_bench_test: stopped {time.time() - t0:.1f} s after SIGTERM, exit {proc.returncode}")
    check(proc.returncode == 143, f"exit {proc.returncode} after SIGTERM, expected 143")
    check_stopped_cleanly(work, tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin-dir", required=True)
    args = ap.parse_args()
    for b in ("tessera", "tessera-bench", "tessera-coordinator", "tessera-worker"):
        if not os.access(os.path.join(args.bin_dir, b), os.X_OK):
            print(f"serve_bench_test: SKIP: {args.bin_dir}/{b} is not built")
            return 77
    with tempfile.TemporaryDirectory(prefix="serve-bench-test-") as tmp:
        env = dict(os.environ, TMPDIR=tmp, SERVE_BENCH_BIN_DIR=os.path.abspath(args.bin_dir))
        env.pop("OUT", None)  # the device tool's folder; a test must not write there
        full_run(env, tmp)
        interrupted_run(env, tmp)
    print("serve_bench_test: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
