#!/usr/bin/env python3
"""Summarises run_spec_decode.sh's raw files: per workload and repetition the decode rate
(1000 / mean TPOT) with and without speculation, their ratio (A/B pairs of the same
repetition), and the acceptance counted by the coordinator. Speculation's counters are
cumulative over a server's life, so the random workload's figures are the difference
from the repeated one's (it runs second on the same server)."""
import argparse
import json
import math
import os


def metric(text, name):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("work")
    ap.add_argument("--reps", type=int, required=True)
    ap.add_argument("--spec-flags", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--markdown", required=True)
    a = ap.parse_args()
    names = ["tessera_spec_decode_num_drafts_total", "tessera_spec_decode_num_draft_tokens_total",
             "tessera_spec_decode_num_accepted_tokens_total", "tessera_spec_decode_acceptance_length_count",
             "tessera_spec_decode_acceptance_length_sum"]
    result = {"schema": "tessera-spec-decode/v1", "spec_flags": a.spec_flags, "model": a.model, "runs": [],
              "workloads": {}}
    conditions = None
    for workload in ("repeated", "random"):
        ratios, rows = [], []
        for rep in range(1, a.reps + 1):
            row = {"rep": rep}
            for mode in ("off", "on"):
                bench = json.load(open(os.path.join(a.work, f"bench_{mode}_{workload}_{rep}.json")))
                conditions = conditions or bench["conditions"]
                m = bench["metrics"]
                row[mode] = {"decode_tokens_per_second": 1000.0 / m["tpot_ms"]["mean"], "tpot_ms": m["tpot_ms"],
                             "ttft_ms": m["ttft_ms"], "output_tokens": m["total_output_tokens"],
                             "failed": m["failed"]}
                if mode == "on":
                    text = open(os.path.join(a.work, f"metrics_on_{workload}_{rep}.txt")).read()
                    counts = {n: metric(text, n) for n in names}
                    if workload == "random":
                        before = open(os.path.join(a.work, f"metrics_on_repeated_{rep}.txt")).read()
                        counts = {n: counts[n] - metric(before, n) for n in names}
                    proposed = counts["tessera_spec_decode_num_draft_tokens_total"]
                    accepted = counts["tessera_spec_decode_num_accepted_tokens_total"]
                    steps = counts["tessera_spec_decode_acceptance_length_count"]
                    row[mode]["speculation"] = {
                        "proposed_tokens": proposed, "accepted_tokens": accepted,
                        "acceptance_rate": accepted / proposed if proposed else 0.0,
                        "mean_acceptance_length": counts["tessera_spec_decode_acceptance_length_sum"] / steps
                        if steps else 0.0}
            row["speedup"] = row["on"]["decode_tokens_per_second"] / row["off"]["decode_tokens_per_second"]
            ratios.append(row["speedup"])
            rows.append(row)
        result["workloads"][workload] = {
            "runs": rows, "speedup_per_rep": ratios, "speedup_min": min(ratios), "speedup_max": max(ratios),
            # Ratios of rates: their geometric mean is the one that does not favour either side.
            "speedup_geomean": math.exp(sum(math.log(r) for r in ratios) / len(ratios))}
    result["conditions"] = {k: conditions[k] for k in ("date", "machine", "build", "model", "dtype", "tp",
                                                        "max_concurrency", "num_requests", "output_len",
                                                        "temperature")}
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)
    lines = [f"# Speculative decoding at batch 1 ({conditions['model']}, {conditions['dtype']}, tp {conditions['tp']})",
             "", f"`{a.spec_flags}` against none, alternated, {a.reps} repetitions; greedy, "
             f"{conditions['num_requests']} requests of {conditions['output_len']} tokens per workload, one at a time; "
             f"{conditions['machine']['cpu_model']}, {conditions['machine']['usable_cores']} cores, "
             f"build {conditions['build']['version']}, {conditions['date']}.", "",
             "| workload | rep | decode tok/s off | on | speed-up | accepted / proposed | tokens per step |",
             "|---|---|---|---|---|---|---|"]
    for workload, w in result["workloads"].items():
        for row in w["runs"]:
            s = row["on"]["speculation"]
            lines.append(f"| {workload} | {row['rep']} | {row['off']['decode_tokens_per_second']:.2f} | "
                         f"{row['on']['decode_tokens_per_second']:.2f} | {row['speedup']:.2f}x | "
                         f"{s['accepted_tokens']:.0f} / {s['proposed_tokens']:.0f} ({100 * s['acceptance_rate']:.0f} %) | "
                         f"{s['mean_acceptance_length']:.2f} |")
    lines.append("")
    for workload, w in result["workloads"].items():
        lines.append(f"{workload}: speed-up {w['speedup_min']:.2f}-{w['speedup_max']:.2f}x over {a.reps} "
                     f"alternated pairs, geometric mean {w['speedup_geomean']:.2f}x.")
    with open(a.markdown, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
