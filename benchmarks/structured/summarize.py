#!/usr/bin/env python3
"""Summarises run_structured_bench.sh: compile and mask costs from `tessera constrain`, and
TPOT / throughput of free text against a JSON-schema constraint at concurrency 1 and 32
(A/B/A/B in one run: the ratios are what count)."""
import argparse
import json
import os
import platform
import statistics
import subprocess


def last_summary(path):
    with open(path) as f:
        for line in f:
            pass
    return json.loads(line)["summary"]


def grammar_counters(work, mode, concurrency, rep):
    """(seconds, rows) of rank 0's grammar counters after that arm; None if not scraped."""
    path = os.path.join(work, f"grammar_{mode}_c{concurrency}_{rep}.txt")
    if not os.path.exists(path):
        return None
    values = {}
    with open(path) as f:
        for line in f:
            name, value = line.split()[:2]
            values[name] = float(value)
    return values.get("tessera_worker_grammar_seconds_total", 0.0), values.get("tessera_worker_grammar_rows_total", 0.0)


def bench(work, mode, concurrency, rep):
    with open(os.path.join(work, f"bench_{mode}_c{concurrency}_{rep}.json")) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("work")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--markdown", required=True)
    args = ap.parse_args()

    compile_all = last_summary(os.path.join(args.work, "constrain.jsonl"))
    cold = last_summary(os.path.join(args.work, "constrain_one_cold.jsonl"))
    warm = last_summary(os.path.join(args.work, "constrain_one_warm.jsonl"))
    runs = {}
    ratios = {}
    for concurrency in (1, 32):
        for mode in ("free", "schema"):
            runs[f"{mode}_c{concurrency}"] = [bench(args.work, mode, concurrency, r)
                                             for r in range(1, args.reps + 1)]
        tpot = {m: [r["metrics"]["tpot_ms"]["mean"] for r in runs[f"{m}_c{concurrency}"]]
                for m in ("free", "schema")}
        tput = {m: [r["metrics"]["output_token_throughput_tps"] for r in runs[f"{m}_c{concurrency}"]]
                for m in ("free", "schema")}
        failed = sum(r["metrics"]["failed"] for m in ("free", "schema") for r in runs[f"{m}_c{concurrency}"])
        # Grammar work per constrained row in each schema arm: counter differences from the
        # previous scrape (the counters only grow; the free arms add nothing).
        per_row_us = []
        for rep in range(1, args.reps + 1):
            after = grammar_counters(args.work, "schema", concurrency, rep)
            before = grammar_counters(args.work, "free", concurrency, rep)
            if after is None or before is None or after[1] <= before[1]:
                continue
            per_row_us.append(1e6 * (after[0] - before[0]) / (after[1] - before[1]))
        ratios[f"c{concurrency}"] = {
            "grammar_us_per_row": per_row_us,
            "tpot_ms_mean_free": tpot["free"],
            "tpot_ms_mean_schema": tpot["schema"],
            "tpot_ratio_schema_over_free": statistics.mean(tpot["schema"]) / statistics.mean(tpot["free"]),
            "output_tps_free": tput["free"],
            "output_tps_schema": tput["schema"],
            "failed_requests": failed,
        }
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    machine = runs["free_c1"][0]["conditions"]["machine"]
    result = {
        "model": args.model,
        "commit": commit,
        "machine": machine,
        "python_platform": platform.platform(),
        "compile": {
            "constraints": compile_all["constraints"],
            "vocab_size": compile_all["vocab_size"],
            "trie_nodes": compile_all["trie_nodes"],
            "vocabulary_build_ms": compile_all["vocabulary_build_ms"],
            "mean_schema_to_gbnf_ms": compile_all["mean_to_gbnf_ms"],
            "mean_grammar_compile_ms": compile_all["mean_grammar_compile_ms"],
            "max_compile_ms": compile_all["max_compile_ms"],
            "mean_first_mask_ms": compile_all["mean_first_mask_ms"],
            "masks_computed": compile_all["masks_computed"],
            "masks_reused": compile_all["masks_reused"],
            "mean_mask_compute_us": compile_all["mean_mask_compute_us"],
            "documents": compile_all["samples"],
            "complete_documents": compile_all["complete"],
            "tokens": compile_all["tokens"],
        },
        "one_schema_cold_document": cold,
        "one_schema_20_documents": warm,
        "decode": ratios,
        "runs": runs,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    c = result["compile"]
    lines = [
        "# Structured outputs: what a constraint costs",
        "",
        f"Commit {commit}; {machine.get('cpu_model', '?')}, {machine.get('usable_cores', '?')} cores; "
        f"model {os.path.basename(args.model.rstrip('/'))} (llama-1b preset, random weights, the real "
        "128,256-token Llama 3 tokenizer).",
        "",
        "## Compile (tessera constrain, 20 typical schemas of 10-20 properties, 5 documents each)",
        "",
        "| step | time |",
        "|---|---|",
        f"| schema to GBNF (mean) | {c['mean_schema_to_gbnf_ms']:.2f} ms |",
        f"| GBNF to grammar (mean) | {c['mean_grammar_compile_ms']:.2f} ms |",
        f"| both, slowest schema | {c['max_compile_ms']:.2f} ms |",
        f"| first token mask (mean) | {c['mean_first_mask_ms']:.2f} ms |",
        f"| one mask, cache miss (mean over {c['masks_computed']} misses) | {c['mean_mask_compute_us']:.0f} us |",
        f"| masks served from the cache | {c['masks_reused']} |",
        f"| vocabulary trie, once per worker ({c['trie_nodes']} nodes) | {c['vocabulary_build_ms']:.0f} ms |",
        "",
        f"One schema's first document on a cold cache: {cold['tokens']} tokens, "
        f"{cold['masks_computed']} masks computed, {cold['sampling_ms']:.1f} ms of engine time "
        f"({cold['mean_us_per_token']:.0f} us per token). Twenty documents of the same schema: "
        f"{warm['mean_us_per_token']:.0f} us per token, {warm['masks_reused']} of "
        f"{warm['masks_reused'] + warm['masks_computed']} masks from the cache.",
        "",
        "## Decode (tessera serve, tessera-bench, greedy, "
        f"{runs['free_c1'][0]['conditions']['input_len']} in / {runs['free_c1'][0]['conditions']['output_len']} out)",
        "",
        "| concurrency | TPOT free (ms) | TPOT schema (ms) | schema / free | tok/s free | tok/s schema |",
        "|---|---|---|---|---|---|",
    ]
    for key, r in ratios.items():
        if r["grammar_us_per_row"]:
            tpot = statistics.mean(r["tpot_ms_mean_schema"])
            share = statistics.mean(r["grammar_us_per_row"]) / 1e3 * (1 if key == "c1" else int(key[1:])) / tpot
            r["grammar_share_of_tpot"] = share
    for key, r in ratios.items():
        lines.append(
            f"| {key[1:]} | {' / '.join(f'{x:.1f}' for x in r['tpot_ms_mean_free'])} | "
            f"{' / '.join(f'{x:.1f}' for x in r['tpot_ms_mean_schema'])} | "
            f"{r['tpot_ratio_schema_over_free']:.3f} | "
            f"{' / '.join(f'{x:.0f}' for x in r['output_tps_free'])} | "
            f"{' / '.join(f'{x:.0f}' for x in r['output_tps_schema'])} |")
    lines += ["", "Each cell lists the repetitions in run order (A/B alternated); the ratio is of the means.", ""]
    for key, r in ratios.items():
        if r["grammar_us_per_row"]:
            lines.append(
                f"Concurrency {key[1:]}: rank 0 spent {' / '.join(f'{x:.0f}' for x in r['grammar_us_per_row'])} us "
                f"per constrained token on the grammar (states, masks, masking), "
                f"{100 * r['grammar_share_of_tpot']:.1f} % of the schema arm's TPOT "
                f"(a step serves {key[1:]} tokens).")
    with open(args.markdown, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(args.out, "w") as f:  # Again, with the grammar shares worked out above.
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
