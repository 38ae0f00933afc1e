#!/usr/bin/env python3
"""Replays greedy outputs through prompt-lookup proposers to predict speculation's speed-up.

Greedy speculation never changes the output, so the tokens a model generates without it
fix what any proposer would have had accepted. For each setting this walks every output
as the worker would (propose from the prompt and the output so far, accept the matching
prefix, gain one token more) and divides the tokens by the cost of the steps, taken from
tessera-verify-cost's measured step costs (1 + proposals tokens against a decode step).

  replay_proposer.py --model DIR --prompts run/prompts_repeated.jsonl \\
      --verify-cost benchmarks/results/verify_cost_llama1b.json

The outputs come from `tessera run` (greedy, --ignore-eos), one process per prompt.
"""
import argparse
import json
import subprocess


def lookup(seq, k, lo, hi, latest=True):
    """What NgramLookup (worker/speculative/ngram_proposer.cc) proposes; first match optional."""
    n_max = min(hi, len(seq) - 1)
    for n in range(n_max, lo - 1, -1):
        suffix = seq[len(seq) - n:]
        starts = range(len(seq) - n - 1, -1, -1) if latest else range(0, len(seq) - n)
        for start in starts:
            if seq[start:start + n] == suffix:
                proposal = []
                for j in range(k):
                    at = start + n + j
                    proposal.append(seq[at] if at < len(seq) else proposal[at - len(seq)])
                return proposal
    return []


def replay(runs, cost, k, lo, hi, latest):
    tokens = spent = 0.0
    for prompt, output in runs:
        i = 0
        while i < len(output):
            kk = min(k, len(output) - i - 1)
            proposal = lookup(prompt + output[:i], kk, lo, hi, latest) if kk > 0 else []
            accepted = 0
            for j, t in enumerate(proposal):
                if output[i + j] != t:
                    break
                accepted += 1
            i += accepted + 1
            tokens += accepted + 1
            spent += cost[1 + len(proposal)]
    return tokens / spent


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True, help="tessera-bench JSON Lines ({prompt: [ids], output_len})")
    ap.add_argument("--verify-cost", required=True, help="tessera-verify-cost --out JSON")
    ap.add_argument("--tessera", default="build/bin/tessera")
    a = ap.parse_args()
    cost = {s["tokens"]: s["relative_to_decode"] for s in json.load(open(a.verify_cost))["steps"]}
    runs = []
    for line in open(a.prompts):
        job = json.loads(line)
        out = subprocess.run([a.tessera, "run", "--model", a.model, "--prompt-ids", ",".join(map(str, job["prompt"])),
                              "--max-tokens", str(job["output_len"]), "--temperature", "0", "--ignore-eos",
                              "--json", "--quiet"], capture_output=True, text=True, check=True).stdout
        runs.append((job["prompt"], json.loads(out)["generated_ids"]))
        print(f"replay_proposer: {len(runs)} outputs", flush=True)
    max_k = max(cost) - 1
    results = []
    for k in range(1, max_k + 1):
        for lo, hi in ((1, 4), (2, 4), (1, 8), (3, 8)):
            for latest in (True, False):
                results.append((replay(runs, cost, k, lo, hi, latest), k, lo, hi, latest))
    for speedup, k, lo, hi, latest in sorted(results, reverse=True)[:10]:
        print(f"k {k}  lookup {lo}..{hi}  {'latest' if latest else 'first'} match  predicted {speedup:.3f}x")


if __name__ == "__main__":
    main()
