#!/usr/bin/env python3
"""What serve_bench.sh cannot do well in bash: HTTP, JSON and arithmetic. Standard library
only (the GPU machine has plain Python).

  free-ports N             first of N consecutive free loopback ports
  wait-ready URL PID T     0 once URL answers 200, 1 if PID exits first, 2 after T seconds
  scrape URL FILE          a /metrics page into FILE (an empty file when unreachable)
  estimate DIR POINT...    seconds a list of points would take (POINT: in,out,c,n,warmup),
                           calibrated on the points already measured in DIR
  record ...               one point's record (JSON) from tessera-bench's result and the
                           /metrics pages around it; prints the progress line
  phase ...                a server phase's record (start time, dtypes, the worker's log)
"""
import argparse
import glob
import json
import math
import os
import random
import re
import socket
import sys
import time
import urllib.error
import urllib.request

# One port finder for the benchmark scripts (standard library only, like this file).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from readme_figures import free_ports  # noqa: E402

FORWARD = "tessera_worker_forward_passes_total"


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode("utf-8", "replace")


def wait_ready(url, pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return 1
        try:
            if http_get(url, timeout=2)[0] == 200:
                return 0
        except (urllib.error.URLError, OSError, ValueError):
            pass  # 503 while loading, refused before the listener is up
        time.sleep(0.5)
    return 2


def parse_metrics(text):
    """{name: [(labels dict, value)]} of a Prometheus text page."""
    out = {}
    for line in text.splitlines():
        # A family with no samples yet shows only its TYPE line: present, at zero.
        t = re.match(r"^# TYPE (\S+) ", line)
        if t:
            out.setdefault(t.group(1), [])
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        out.setdefault(m.group(1), []).append((labels, value))
    return out


def read_metrics(paths):
    pages = []
    for p in paths:
        try:
            with open(p) as f:
                pages.append(parse_metrics(f.read()))
        except OSError:
            pages.append({})
    return pages


def forward_counts(pages):
    """{step: {graph: count}} summed over workers; None when no page has the counter."""
    found = False
    counts = {}
    for page in pages:
        found = found or FORWARD in page
        for labels, value in page.get(FORWARD, []):
            step = counts.setdefault(labels.get("step", "?"), {})
            graph = labels.get("graph", "?")
            step[graph] = step.get(graph, 0) + value
    return counts if found else None


def metric_sum(pages, name):
    values = [v for page in pages for _, v in page.get(name, [])]
    return sum(values) if values else None


def delta_counts(before, after):
    if before is None or after is None:
        return None
    out = {}
    for step, graphs in after.items():
        for graph, value in graphs.items():
            d = value - before.get(step, {}).get(graph, 0)
            out.setdefault(step, {})[graph] = int(round(d))
    return out


def replay_share(counts, step="decode"):
    if counts is None:
        return None
    graphs = counts.get(step, {})
    total = sum(graphs.values())
    return graphs.get("replayed", 0) / total if total > 0 else None


# ---- Time estimates. A decode step over b sequences of average context t costs
# a + b_seq * b + kv * b * t ms (the weights once, per-sequence work, the KV read); a prefill
# costs p ms a prompt token. Defaults are the H200's gpu_bench figures (BF16, eager launch:
# 6.3 ms at batch 1, 21 ms at 256, 2,048-token prefill 114 ms, a BF16 KV token 128 KiB over
# ~4 TB/s); measured points replace a, b_seq and p as they come in.
def load_records(directory):
    records = []
    for path in sorted(glob.glob(os.path.join(directory, "point-*.json"))):
        with open(path) as f:
            records.append(json.load(f))
    return records


def calibrate(records, a, b, kv, p):
    ok = [r for r in records if r.get("status") == "ok" and r.get("metrics")]
    # Batch-1 TTFT over the longest prompt: the per-token cost with the least fixed overhead.
    firsts = [r for r in ok if r["concurrency"] == 1 and r["metrics"].get("ttft_ms", {}).get("count")]
    if firsts:
        r = max(firsts, key=lambda r: r["input_len"])
        p = r["metrics"]["ttft_ms"]["p50"] / r["input_len"]
    data = []
    for r in ok:
        tpot = r["metrics"].get("tpot_ms", {})
        if not tpot.get("count"):
            continue
        c = min(r["concurrency"], r["num_requests"])
        ctx = r["input_len"] + r["output_len"] / 2
        data.append((c, tpot["p50"] - kv * c * ctx))
    cs = sorted({c for c, _ in data})
    if len(cs) >= 2:
        n = len(data)
        mx = sum(c for c, _ in data) / n
        my = sum(y for _, y in data) / n
        sxx = sum((c - mx) ** 2 for c, _ in data)
        b = max(0.0, sum((c - mx) * (y - my) for c, y in data) / sxx)
        a = max(my - b * mx, 0.05 * my)
    elif len(cs) == 1:
        y = max(y for _, y in data)
        a = max(y - b * cs[0], 0.5 * y)
        b = (y - a) / cs[0]
    return a, b, kv, p


def estimate_point(point, model, overhead_s):
    a, b, kv, p = model
    inp, out, c, n, warm = point

    def waves(count):
        width = min(c, count)
        per_wave = width * inp * p + out * (a + b * width + kv * width * (inp + out / 2))
        return math.ceil(count / c) * per_wave

    return (waves(n) + (waves(warm) if warm > 0 else 0)) / 1000 + overhead_s


def cmd_estimate(args):
    model = calibrate(load_records(args.dir), args.step_ms, args.step_ms_per_seq,
                      args.kv_ms_per_token, args.prefill_ms_per_token)
    total = 0.0
    for spec in args.points:
        inp, out, c, n, warm = (int(x) for x in spec.split(","))
        total += estimate_point((inp, out, c, n, warm), model, args.overhead_s)
    print(int(math.ceil(total * args.margin)))


# ---- A point's record and its progress line.
def fmt(v, digits=1):
    return "n/a" if v is None else f"{v:.{digits}f}"


def cmd_record(args):
    rec = {"phase": args.phase, "input_len": args.input_len, "output_len": args.output_len,
           "concurrency": args.concurrency, "num_requests": args.num_requests,
           "warmup": args.warmup, "status": args.status, "reason": args.reason or None,
           "estimate_s": args.estimate_s, "wall_s": args.wall_s, "metrics": None,
           "forward_passes": None, "decode_graph_replay_share": None, "preemptions": None,
           "bench_exit": args.bench_exit}
    if args.bench_json and os.path.exists(args.bench_json):
        with open(args.bench_json) as f:
            bench = json.load(f)
        rec["metrics"] = bench.get("metrics")
        cond = bench.get("conditions", {})
        rec["conditions"] = {k: cond.get(k) for k in
                             ("model", "dtype", "tp", "block_size", "max_context", "date",
                              "machine", "build")}
        failed = rec["metrics"].get("failed", 0)
        if rec["status"] == "ok" and failed:
            rec["status"] = "failed"
            rec["reason"] = f"{failed} of {args.num_requests} requests failed (see the point's log)"
    elif rec["status"] == "ok":
        rec["status"] = "failed"
        rec["reason"] = f"tessera-bench wrote no result (exit {args.bench_exit})"
    if args.before_workers is not None:
        before = read_metrics(args.before_workers)
        after = read_metrics(args.after_workers)
        rec["forward_passes"] = delta_counts(forward_counts(before), forward_counts(after))
        rec["decode_graph_replay_share"] = replay_share(rec["forward_passes"])
    if args.before_coordinator:
        b, a = read_metrics([args.before_coordinator, args.after_coordinator])
        pb, pa = metric_sum([b], "tessera_preemptions_total"), metric_sum([a], "tessera_preemptions_total")
        if pb is not None and pa is not None:
            rec["preemptions"] = int(round(pa - pb))
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1)
        f.write("\n")

    head = f"{args.phase} {args.input_len}/{args.output_len} c={args.concurrency}"
    if rec["status"] == "skipped":
        print(f"{head}: skipped: {rec['reason']}")
        return 0
    if rec["metrics"] is None:
        print(f"{head}: {rec['status'].upper()}: {rec['reason']}")
        return 3
    m = rec["metrics"]
    share = rec["decode_graph_replay_share"]
    wall = f"{args.wall_s:.1f}" if args.wall_s < 10 else f"{args.wall_s:.0f}"
    line = (f"{head}: {args.num_requests} req (+{args.warmup} warm-up) in {wall} s: "
            f"{m['output_token_throughput_tps']:,.0f} out tok/s, "
            f"TTFT {fmt(m['ttft_ms']['p50'])}/{fmt(m['ttft_ms']['p99'])} ms, "
            f"TPOT {fmt(m['tpot_ms'].get('p50'), 2)}/{fmt(m['tpot_ms'].get('p99'), 2)} ms, "
            f"ITL {fmt(m['itl_ms'].get('p50'), 2)}/{fmt(m['itl_ms'].get('p99'), 2)} ms (p50/p99), "
            f"decode graphs {'n/a' if share is None else f'{100 * share:.1f} %'}")
    if rec["preemptions"]:
        line += f", {rec['preemptions']} preemptions"
    if rec["status"] != "ok":
        line += f"; {rec['status'].upper()}: {rec['reason']}"
    print(line)
    return 0 if rec["status"] == "ok" else 3


# ---- A server phase: how long it took to be ready and what it serves.
def cmd_phase(args):
    rec = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            rec = json.load(f)
    rec.update({"phase": args.phase})
    for key, value in (("status", args.status), ("reason", args.reason),
                       ("start_s", args.start_s), ("stop_s", args.stop_s)):
        if value is not None:
            rec[key] = value
    if args.serve_args is not None:
        rec["serve_args"] = args.serve_args
    if args.coordinator_metrics:
        page = read_metrics([args.coordinator_metrics])[0]
        info = page.get("tessera_config_info", [])
        if info:
            rec["config"] = info[0][0]
        per_token = metric_sum([page], "tessera_kv_cache_bytes_per_token")
        if per_token is not None:
            rec["kv_cache_bytes_per_token"] = int(per_token)
        blocks = metric_sum([page], "tessera_kv_cache_free_blocks")
        if blocks is not None:
            rec["kv_cache_free_blocks_at_start"] = int(blocks)
    if args.serve_log and os.path.exists(args.serve_log):
        with open(args.serve_log, errors="replace") as f:
            log = f.read()
        m = re.search(r"computing on (\S+) \((.*), ([\d.]+) of ([\d.]+) GB free, (\S+) activations\)", log)
        if m:
            rec["worker"] = {"backend": m.group(1), "device": m.group(2),
                             "free_gb_before_load": float(m.group(3)),
                             "total_gb": float(m.group(4)), "activation_dtype": m.group(5)}
        # Two forms of the worker's load line: the older one and the one with the memory plan.
        m = re.search(r"loaded .* \(([\d.]+) ([KMG]B) of weights\), room for (\d+) KV blocks", log)
        if m:
            scale = {"KB": 1e-6, "MB": 1e-3, "GB": 1.0}[m.group(2)]
            rec["weights_gb"] = round(float(m.group(1)) * scale, 3)
            rec["kv_blocks"] = int(m.group(3))
        m = re.search(r"loaded \S+ in ([\d.]+) s: weights ([\d.]+) GiB, KV pool ([\d.]+) GiB "
                      r"\((\d+) blocks\), activation reserve ([\d.]+) GiB; device ([\d.]+) GiB, "
                      r"([\d.]+) GiB free after loading", log)
        if m:
            rec["load_s"] = float(m.group(1))
            rec["weights_gb"] = round(float(m.group(2)) * 1.073741824, 3)
            rec["kv_pool_gib"] = float(m.group(3))
            rec["kv_blocks"] = int(m.group(4))
            rec["activation_reserve_gib"] = float(m.group(5))
            rec["device_gib"] = float(m.group(6))
            rec["free_after_load_gib"] = float(m.group(7))
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1)
        f.write("\n")
    if args.print_line:
        w = rec.get("worker", {})
        cfg = rec.get("config", {})
        weights = cfg.get("quantization", "?")
        if weights == "none":
            weights = cfg.get("dtype", "?")  # the checkpoint's own
        print(f"{args.phase} server ready in {rec.get('start_s', 0):.0f} s: "
              f"{w.get('device', '?')}, {w.get('activation_dtype', '?')} activations, weights "
              f"{weights} ({rec.get('weights_gb', '?')} GB), KV cache "
              f"{cfg.get('kv_cache_dtype', '?')} ({rec.get('kv_blocks', '?')} blocks of "
              f"{cfg.get('block_size', '?')})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("free-ports")
    s.add_argument("n", type=int)
    s = sub.add_parser("wait-ready")
    s.add_argument("url")
    s.add_argument("pid", type=int)
    s.add_argument("timeout", type=float)
    s = sub.add_parser("scrape")
    s.add_argument("url")
    s.add_argument("out")
    s = sub.add_parser("estimate")
    s.add_argument("dir")
    s.add_argument("points", nargs="*")
    s.add_argument("--step-ms", type=float, default=6.0)
    s.add_argument("--step-ms-per-seq", type=float, default=0.06)
    s.add_argument("--kv-ms-per-token", type=float, default=4e-5)
    s.add_argument("--prefill-ms-per-token", type=float, default=0.06)
    s.add_argument("--overhead-s", type=float, default=2.0)
    s.add_argument("--margin", type=float, default=1.15)
    s = sub.add_parser("record")
    for name in ("phase", "status", "reason", "bench-json", "out", "before-coordinator",
                 "after-coordinator"):
        s.add_argument("--" + name, default="")
    for name in ("input-len", "output-len", "concurrency", "num-requests", "warmup"):
        s.add_argument("--" + name, type=int, required=True)
    s.add_argument("--bench-exit", type=int, default=0)
    s.add_argument("--estimate-s", type=float, default=0)
    s.add_argument("--wall-s", type=float, default=0)
    s.add_argument("--before-workers", nargs="*")
    s.add_argument("--after-workers", nargs="*")
    s = sub.add_parser("phase")
    s.add_argument("--phase", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--status")
    s.add_argument("--reason")
    s.add_argument("--start-s", type=float)
    s.add_argument("--stop-s", type=float)
    s.add_argument("--serve-args", help="the serve command line, one string")
    s.add_argument("--coordinator-metrics")
    s.add_argument("--serve-log")
    s.add_argument("--print-line", action="store_true")
    args = ap.parse_args()

    if args.cmd == "free-ports":
        print(free_ports(args.n))
    elif args.cmd == "wait-ready":
        sys.exit(wait_ready(args.url, args.pid, args.timeout))
    elif args.cmd == "scrape":
        try:
            body = http_get(args.url)[1]
        except (urllib.error.URLError, OSError, ValueError):
            body = ""
        with open(args.out, "w") as f:
            f.write(body)
    elif args.cmd == "estimate":
        cmd_estimate(args)
    elif args.cmd == "record":
        sys.exit(cmd_record(args))
    elif args.cmd == "phase":
        cmd_phase(args)


if __name__ == "__main__":
    main()
