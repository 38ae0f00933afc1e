#!/usr/bin/python3
"""Time to first token of a long prompt whose prefix comes back from the host KV tier,
against computing the same prompt.

    host_tier_ttft.py --build-dir build [--model DIR] [--prompt-len 2048] [--reps 3] --out result.json

Starts a coordinator (--kv-host-cache-gb, a device pool of about one prompt) and one tp-1
worker on 127.0.0.1, then per rep sends, one at a time, greedy requests of one token:
  1. a fresh prompt P (its prefill computed: "recompute"),
  2. a fresh prompt of the same length, and one of 256 tokens: together they evict every
     block of P from the device pool, so the pool saves them to the host tier,
  3. P again: its full blocks are loaded from the host tier ("host tier").
TTFT is the coordinator's time_to_first_token_seconds (arrival to first token). Each
answer to P again must report the prefix as cached, come from the host tier (its counter
grows by the same number of tokens) and carry P's first greedy token. Default model: the
random-weight llama-1b BF16 checkpoint of benchmarks/report/run_sweep.sh (generated when
missing).
"""

import argparse
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "clients" / "python"))
from local_cluster import LocalCluster, cpu_model, ensure_llama1b, metric_sum  # noqa: E402
from tessera_client import TesseraClient  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--model", default="/tmp/tessera-llama-1b-bf16")
    parser.add_argument("--prompt-len", type=int, default=2048)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--kv-memory-mb", type=int, default=72, help="Device pool: a little more than one prompt.")
    parser.add_argument("--host-cache-gb", type=float, default=1.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    bin_dir = pathlib.Path(args.build_dir) / "bin"
    model = pathlib.Path(args.model)
    ensure_llama1b(bin_dir, model, "host_tier_ttft")

    flags = ["--kv-memory-mb", str(args.kv_memory_mb), "--kv-host-cache-gb", str(args.host_cache_gb),
             "--max-num-seqs", "4", "--max-num-batched-tokens", str(args.prompt_len + 64),
             "--max-model-len", str(args.prompt_len + 512)]
    rng = random.Random(20261207)

    def fresh(n):
        return [1] + [rng.randrange(1000, 100000) for _ in range(n - 1)]

    rows = []
    with LocalCluster(args.build_dir, model, flags, "tessera-host-tier-") as cluster:
        if not cluster.wait_ready(600):
            sys.exit(f"host_tier_ttft: the cluster did not get ready; logs in {cluster.work}")
        with TesseraClient(cluster.address) as client:
            def ttft(ids):
                done = client.generate(prompt_ids=ids, max_tokens=1, temperature=0, ignore_eos=True)
                return done.timings["time_to_first_token_seconds"], done.usage["cached_prompt_tokens"], done.token_ids

            for rep in range(args.reps):
                prompt = fresh(args.prompt_len)
                cold_s, cold_cached, cold_tokens = ttft(prompt)
                other_s, _, _ = ttft(fresh(args.prompt_len))
                ttft(fresh(256))
                hits_before = metric_sum(cluster.metrics(), "tessera_kv_host_tier_hits_tokens_total")
                host_s, host_cached, host_tokens = ttft(prompt)
                time.sleep(0.3)  # The engine publishes its counters once per loop.
                host_hit_tokens = metric_sum(cluster.metrics(), "tessera_kv_host_tier_hits_tokens_total") - hits_before
                row = {"rep": rep, "recompute_ttft_s": [cold_s, other_s], "host_tier_ttft_s": host_s,
                       "cached_prompt_tokens": host_cached, "host_tier_hit_tokens": host_hit_tokens,
                       "cold_cached_prompt_tokens": cold_cached, "same_first_token": host_tokens == cold_tokens}
                print(json.dumps(row), flush=True)
                rows.append(row)
        saved = metric_sum(cluster.metrics(), "tessera_kv_host_tier_saved_blocks_total")

    recompute = [s for r in rows for s in r["recompute_ttft_s"]]
    host = [r["host_tier_ttft_s"] for r in rows]
    full_blocks = (args.prompt_len - 1) // 16 * 16
    result = {
        "schema": "tessera-host-tier-ttft/v1",
        "conditions": {
            "model": str(model), "prompt_tokens": args.prompt_len, "max_new_tokens": 1, "tp": 1,
            "worker_threads": 1, "coordinator_flags": flags, "block_size": 16,
            "machine": {"cpu_model": cpu_model(), "logical_cores": os.cpu_count()},
            "build": subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                                    text=True).stdout.strip(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "reps": rows,
        "host_tier_saved_blocks": saved,
        "recompute_ttft_s": {"median": statistics.median(recompute), "min": min(recompute), "max": max(recompute)},
        "host_tier_ttft_s": {"median": statistics.median(host), "min": min(host), "max": max(host)},
        "speedup_of_medians": statistics.median(recompute) / statistics.median(host),
    }
    pathlib.Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"recompute TTFT median {result['recompute_ttft_s']['median']:.3f} s, host tier "
          f"{result['host_tier_ttft_s']['median']:.3f} s: {result['speedup_of_medians']:.1f}x")
    ok = all(r["cached_prompt_tokens"] == full_blocks and r["host_tier_hit_tokens"] == full_blocks and
             r["same_first_token"] and r["cold_cached_prompt_tokens"] == 0 for r in rows)
    if not ok:
        sys.exit("host_tier_ttft: a repeated prompt was not served from the host tier, or changed its token")


if __name__ == "__main__":
    main()
