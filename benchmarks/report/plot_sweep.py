#!/usr/bin/python3
"""Turns a sweep's result files into PNG charts and a Markdown summary.

Usage: plot_sweep.py RESULTS_DIR [--prefix NAME]

Reads RESULTS_DIR/<prefix>_tp<T>_c<C>.json (tessera-bench results) and, when present,
RESULTS_DIR/<prefix>_roofline_*.json (tessera-roofline) and RESULTS_DIR/<prefix>_run_batch1.json
(`tessera run --json`). Writes <prefix>_ttft.png, <prefix>_tpot.png, <prefix>_e2e.png
(p50/p95/p99 against concurrency, one colour per tp), <prefix>_throughput.png and
<prefix>_summary.md. Standard library only.
"""

import argparse
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import png_chart  # noqa: E402

DASHES = {"p50": None, "p95": (10, 6), "p99": (3, 5)}


def load_results(results_dir, prefix):
    runs = {}
    for path in glob.glob(os.path.join(results_dir, f"{prefix}_tp*_c*.json")):
        m = re.search(r"_tp(\d+)_c(\d+)\.json$", path)
        if not m:
            continue
        with open(path) as f:
            data = json.load(f)
        if data.get("schema") != "tessera-bench/v1":
            print(f"plot_sweep: skipping {path}: schema {data.get('schema')!r}", file=sys.stderr)
            continue
        runs.setdefault(int(m.group(1)), {})[int(m.group(2))] = data
    return runs


def latency_chart(runs, metric, title, path):
    series = []
    for n, tp in enumerate(sorted(runs)):
        for pct in ("p50", "p95", "p99"):
            pts = [(c, r["metrics"][metric][pct]) for c, r in runs[tp].items()
                   if r["metrics"][metric]["count"] > 0]
            if pts:
                series.append((f"tp{tp} {pct}", pts, {"color": n, "dash": DASHES[pct]}))
    if series:
        png_chart.line_chart(path, title, "concurrency (requests in flight)", "ms", series)
        return True
    return False


def throughput_chart(runs, path):
    series = []
    for n, tp in enumerate(sorted(runs)):
        series.append((f"tp{tp} output", [(c, r["metrics"]["output_token_throughput_tps"])
                                          for c, r in runs[tp].items()], {"color": n}))
        series.append((f"tp{tp} total", [(c, r["metrics"]["total_token_throughput_tps"])
                                         for c, r in runs[tp].items()],
                       {"color": n, "dash": (10, 6)}))
    png_chart.line_chart(path, "Throughput vs concurrency", "concurrency (requests in flight)",
                         "tokens/s", series)


def summary(runs, results_dir, prefix):
    lines = [f"# Sweep `{prefix}`", ""]
    any_run = next((r for tp in runs.values() for r in tp.values()), None)
    if any_run:
        c = any_run["conditions"]
        m = c["machine"]
        gpus = ", ".join(f"{g['name']} (driver {g['driver']})" for g in m["gpus"]) or "none"
        lines += [f"- model: {c['model']} ({c['dtype']}), block size {c['block_size']}",
                  f"- workload: {c['workload']}, input {c['input_len']} / output {c['output_len']} tokens,"
                  f" {c['warmup_requests']} warm-up requests, arrivals {c['arrivals']}",
                  f"- machine: {m['cpu_model']}, {m['logical_cores']} cores"
                  f" ({m['usable_cores']} usable), {m['memory_bytes'] / 2**30:.1f} GiB, GPUs: {gpus}",
                  f"- build: {c['build']['build_type']} {c['build']['version']}, date {c['date']}", ""]
    for path in sorted(glob.glob(os.path.join(results_dir, f"{prefix}_roofline_*.json"))):
        with open(path) as f:
            r = json.load(f)
        rc = r["conditions"]
        bw = r["bandwidth"].get("ceiling_bytes_per_second", r["bandwidth"]["best_bytes_per_second"])
        paired = r.get("paired_roofline_fraction")
        lines.append(
            f"- roofline (batch {rc['batch']}, context {rc['context_tokens']}, {rc['threads']} threads):"
            f" {r['traffic_bytes']['total'] / 1e6:.0f} MB/step at {bw / 1e9:.2f} GB/s"
            f" = {r['theoretical_step_s'] * 1e3:.1f} ms theoretical, {r['measured_step_s']['median'] * 1e3:.1f} ms"
            f" measured: **{r['roofline_fraction'] * 100:.1f}% of roofline**"
            + (f" ({paired * 100:.1f}% paired with the read after each step)" if paired is not None else "")
            + f", {r['decode_tokens_per_second']:.2f} tokens/s")
    run_path = os.path.join(results_dir, f"{prefix}_run_batch1.json")
    if os.path.exists(run_path):
        with open(run_path) as f:
            r = json.load(f)
        lines.append(f"- `tessera run` batch-1 decode: {r['timings']['decode_tokens_per_second']:.2f} tokens/s")
    lines += ["", "| tp | concurrency | requests | failed | output tok/s | total tok/s | TTFT p50 / p99 ms"
              " | TPOT p50 / p99 ms | ITL p50 ms | E2E p50 / p99 ms |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for tp in sorted(runs):
        for conc in sorted(runs[tp]):
            m = runs[tp][conc]["metrics"]
            lines.append(
                f"| {tp} | {conc} | {m['completed']} | {m['failed']} | {m['output_token_throughput_tps']:.2f}"
                f" | {m['total_token_throughput_tps']:.2f} | {m['ttft_ms']['p50']:.0f} / {m['ttft_ms']['p99']:.0f}"
                f" | {m['tpot_ms']['p50']:.0f} / {m['tpot_ms']['p99']:.0f} | {m['itl_ms']['p50']:.0f}"
                f" | {m['e2e_ms']['p50']:.0f} / {m['e2e_ms']['p99']:.0f} |")
    lines.append("")
    for tp in sorted(runs):
        base = runs[tp].get(1)
        if base and base["metrics"]["output_token_throughput_tps"] > 0:
            for conc in sorted(runs[tp]):
                if conc == 1:
                    continue
                ratio = (runs[tp][conc]["metrics"]["output_token_throughput_tps"] /
                         base["metrics"]["output_token_throughput_tps"])
                lines.append(f"- tp{tp}: output throughput at concurrency {conc} is {ratio:.2f}x concurrency 1")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results_dir")
    parser.add_argument("--prefix", default="sweep")
    args = parser.parse_args()
    runs = load_results(args.results_dir, args.prefix)
    if not runs:
        print(f"plot_sweep: no {args.prefix}_tp*_c*.json in {args.results_dir}", file=sys.stderr)
        return 1
    out = lambda name: os.path.join(args.results_dir, f"{args.prefix}_{name}")
    latency_chart(runs, "ttft_ms", "Time to first token", out("ttft.png"))
    latency_chart(runs, "tpot_ms", "Time per output token", out("tpot.png"))
    latency_chart(runs, "e2e_ms", "End-to-end latency", out("e2e.png"))
    throughput_chart(runs, out("throughput.png"))
    text = summary(runs, args.results_dir, args.prefix)
    with open(out("summary.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
