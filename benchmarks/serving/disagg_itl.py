#!/usr/bin/python3
"""Inter-token latency of decoding streams while long prompts arrive: one prefill + one
decode replica (--replica-roles prefill,decode) against two `both` replicas.

    disagg_itl.py --build-dir build [--model DIR] [--streams 32] [--long-prompt 2048]
                  [--long-every 8] [--window 64] [--reps 2] --out result.json

Per configuration, a coordinator and two tp-1 workers on 127.0.0.1, each worker pinned to
a core of its own (taskset -c 0 / -c 1, --threads 1); the coordinator and this client float.
The same flags for both configurations (--max-num-batched-tokens 512: chunked prefill, so
a `both` replica interleaves its decodes with prompt chunks instead of stalling for a whole
prompt). The load:
  1. `--streams` greedy streams with short random prompts and no end in sight (ignore_eos),
     started together; the measurement starts once every stream has its first token;
  2. during `--window` seconds, a `--long-prompt`-token prompt (random ids, 16 new tokens)
     every `--long-every` seconds.
Inter-token latency is the client-side gap between consecutive tokens of a stream inside
the window (p50/p95/p99 over all streams); output tok/s counts every token generated in
the window (streams and long prompts). Configurations alternate A/B/A/B (--reps 2), and
the figures of each run go to --out with the machine and the build. Default model: the
random-weight llama-1b BF16 checkpoint (generated when missing), as host_tier_ttft.py.
"""

import argparse
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "clients" / "python"))
from local_cluster import cpu_model, ensure_llama1b, free_port, metric_sum  # noqa: E402
from tessera_client import TesseraClient  # noqa: E402


def percentile(values, p):
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Cluster:
    """A coordinator and two pinned tp-1 workers (replica 0 on core 0, replica 1 on core 1)."""

    def __init__(self, bin_dir, model, flags):
        self.bin_dir, self.model, self.flags = bin_dir, model, flags
        self.work = pathlib.Path(tempfile.mkdtemp(prefix="tessera-disagg-"))
        self.port, self.cluster_port, self.metrics_port = free_port(), free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs = []

    def __enter__(self):
        self.procs.append(subprocess.Popen(
            [str(self.bin_dir / "tessera-coordinator"), "--model", str(self.model), "--port", str(self.port),
             "--cluster-port", str(self.cluster_port), "--metrics-port", str(self.metrics_port), "--insecure",
             "--replicas", "2"] + self.flags,
            stdout=open(self.work / "coordinator.log", "w"), stderr=subprocess.STDOUT))
        time.sleep(0.5)
        for replica in (0, 1):
            self.procs.append(subprocess.Popen(
                ["taskset", "-c", str(replica), str(self.bin_dir / "tessera-worker"),
                 "--coordinator", f"127.0.0.1:{self.cluster_port}", "--threads", "1", "--metrics-port", "0",
                 "--insecure", "--replica-hint", str(replica), "--rank-hint", "0"],
                stdout=open(self.work / f"worker{replica}.log", "w"), stderr=subprocess.STDOUT))
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        return False

    def metrics(self):
        return urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics").read().decode()


def run(config, roles, args, bin_dir, model):
    flags = ["--kv-memory-mb", str(args.kv_memory_mb), "--max-num-batched-tokens", "512",
             "--max-model-len", str(args.long_prompt + 4096)]
    if roles:
        flags.append(f"--replica-roles={roles}")
    rng = random.Random(20261207)
    with Cluster(bin_dir, model, flags) as cluster:
        client = TesseraClient(cluster.address, timeout=3600)
        print(f"[{config}] loading the model into two workers ...", flush=True)
        client.wait_ready(timeout=900)
        deadline = time.time() + 900
        while sum(r.healthy for r in client.model_info().replica_info) < 2:  # SERVING means one.
            if time.time() > deadline:
                raise TimeoutError("two replicas did not become ready")
            time.sleep(0.5)
        lock = threading.Lock()
        stop = threading.Event()
        window = {"start": None, "end": None}
        stamps = [[] for _ in range(args.streams)]  # Per stream: (time, tokens) per chunk.
        first_token = threading.Barrier(args.streams + 1)
        errors = []

        def stream(i):
            prompt = [1] + [rng.randrange(1000, 100000) for _ in range(args.stream_prompt - 1)]
            got_first = False
            try:
                for chunk in client.generate_stream(prompt_ids=prompt, max_tokens=args.stream_tokens,
                                                    temperature=0.0, ignore_eos=True):
                    now = time.monotonic()
                    if chunk.token_ids:
                        stamps[i].append((now, len(chunk.token_ids)))
                        if not got_first:
                            got_first = True
                            first_token.wait()
                    if stop.is_set():
                        break
            except Exception as e:  # noqa: BLE001 - reported in the results
                with lock:
                    errors.append(f"stream {i}: {e}")
                if not got_first:
                    first_token.abort()

        long_results = []

        def long_prompt(k):
            prompt = [1] + [rng.randrange(1000, 100000) for _ in range(args.long_prompt - 1)]
            sent = time.monotonic()
            first, tokens, times = None, 0, []
            try:
                for chunk in client.generate_stream(prompt_ids=prompt, max_tokens=16, temperature=0.0,
                                                    ignore_eos=True):
                    if chunk.token_ids:
                        now = time.monotonic()
                        first = first or now
                        tokens += len(chunk.token_ids)
                        times.append((now, len(chunk.token_ids)))
                    if stop.is_set():
                        break
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(f"long prompt {k}: {e}")
            with lock:
                long_results.append({"ttft_s": (first - sent) if first else None, "tokens": tokens, "times": times,
                                     "sent": sent})

        threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(args.streams)]
        for t in threads:
            t.start()
        print(f"[{config}] {args.streams} streams starting ...", flush=True)
        first_token.wait()
        time.sleep(2)  # Past the streams' own prefills.
        window["start"] = time.monotonic()
        metrics_before = cluster.metrics()
        longs = []
        k = 0
        while time.monotonic() - window["start"] < args.window:
            t = threading.Thread(target=long_prompt, args=(k,), daemon=True)
            t.start()
            longs.append(t)
            k += 1
            print(f"[{config}] long prompt {k} sent at {time.monotonic() - window['start']:.0f} s", flush=True)
            time.sleep(min(args.long_every, max(0.0, args.window - (time.monotonic() - window["start"]))))
        window["end"] = time.monotonic()
        metrics_after = cluster.metrics()
        stop.set()
        for t in threads + longs:
            t.join(timeout=120)
        client.close()

    start, end = window["start"], window["end"]
    gaps, stream_tokens, worst = [], 0, []
    for i, s in enumerate(stamps):
        prev = None
        for when, n in s:
            if start <= when <= end:
                stream_tokens += n
                if prev is not None and prev >= start:
                    gaps.append((when - prev) / n)
                    worst.append((when - prev, i, prev - start))
            prev = when
    worst.sort(reverse=True)
    long_tokens = sum(n for r in long_results for when, n in r["times"] if start <= when <= end)
    ttfts = [r["ttft_s"] for r in long_results if r["ttft_s"] is not None]
    transfers = metric_sum(metrics_after, "tessera_kv_transfers_total", 'outcome="ok"') - \
        metric_sum(metrics_before, "tessera_kv_transfers_total", 'outcome="ok"')
    transfer_bytes = metric_sum(metrics_after, "tessera_kv_transfer_bytes_total") - \
        metric_sum(metrics_before, "tessera_kv_transfer_bytes_total")
    for r in long_results:
        del r["times"]
    transfer_count = metric_sum(metrics_after, "tessera_kv_transfer_seconds_count") - \
        metric_sum(metrics_before, "tessera_kv_transfer_seconds_count")
    transfer_sum = metric_sum(metrics_after, "tessera_kv_transfer_seconds_sum") - \
        metric_sum(metrics_before, "tessera_kv_transfer_seconds_sum")
    result = {
        "config": config, "replica_roles": roles or "both,both",
        "window_s": end - start, "long_prompts_sent": len(long_results),
        "itl_s": {"p50": percentile(gaps, 50), "p95": percentile(gaps, 95), "p99": percentile(gaps, 99),
                  "max": max(gaps) if gaps else None, "samples": len(gaps)},
        "output_tokens": stream_tokens + long_tokens, "output_tok_s": (stream_tokens + long_tokens) / (end - start),
        "stream_tok_s": stream_tokens / (end - start),
        "long_prompt_ttft_s": {"p50": percentile(ttfts, 50), "max": max(ttfts) if ttfts else None,
                               "answered": len(ttfts)},
        "worst_gaps": [{"gap_s": g, "stream": i, "at_s": a} for g, i, a in worst[:5]],
        "long_prompt_sent_at_s": [r["sent"] - start for r in long_results],
        "kv_transfers_in_window": transfers, "kv_transfer_bytes_in_window": transfer_bytes,
        "kv_transfer_mean_s": transfer_sum / transfer_count if transfer_count else None,
        "errors": errors,
    }
    print(json.dumps(result, indent=2), flush=True)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--model", default="/tmp/tessera-llama-1b-bf16")
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--stream-prompt", type=int, default=32)
    parser.add_argument("--stream-tokens", type=int, default=4096, help="Never reached in the window.")
    parser.add_argument("--long-prompt", type=int, default=2048)
    parser.add_argument("--long-every", type=float, default=8.0)
    parser.add_argument("--window", type=float, default=64.0)
    parser.add_argument("--kv-memory-mb", type=int, default=2048)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--only", choices=["both", "disaggregated"], help="Run one configuration (no summary).")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    args.configs = [c for c in (("both", ""), ("disaggregated", "prefill,decode")) if args.only in (None, c[0])]

    bin_dir = pathlib.Path(args.build_dir) / "bin"
    model = pathlib.Path(args.model)
    ensure_llama1b(bin_dir, model, "disagg_itl")
    runs = []
    for rep in range(args.reps):
        for config, roles in args.configs:
            print(f"disagg_itl: rep {rep + 1}/{args.reps}, {config}", flush=True)
            runs.append(run(config, roles, args, bin_dir, model))

    if args.only:
        pathlib.Path(args.out).write_text(json.dumps({"runs": runs}, indent=2) + "\n")
        return 0

    def summary(config):
        rs = [r for r in runs if r["config"] == config]
        return {"itl_p99_s": statistics.median(r["itl_s"]["p99"] for r in rs),
                "itl_p50_s": statistics.median(r["itl_s"]["p50"] for r in rs),
                "output_tok_s": statistics.median(r["output_tok_s"] for r in rs)}
    both, disagg = summary("both"), summary("disaggregated")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {
        "schema": "tessera-disagg-itl/v1",
        "conditions": {"model": str(model), "streams": args.streams, "stream_prompt_tokens": args.stream_prompt,
                       "long_prompt_tokens": args.long_prompt, "long_every_s": args.long_every,
                       "window_s": args.window, "max_num_batched_tokens": 512,
                       "workers": "2 x tp 1, --threads 1, taskset -c 0 and -c 1", "order": "A/B alternating",
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        "machine": {"cpu_model": cpu_model(), "logical_cores": os.cpu_count()},
        "build": {"commit": commit},
        "runs": runs,
        "summary": {"both": both, "disaggregated": disagg,
                    "itl_p99_ratio_both_over_disaggregated": both["itl_p99_s"] / disagg["itl_p99_s"],
                    "output_tok_s_ratio_disaggregated_over_both": disagg["output_tok_s"] / both["output_tok_s"]},
    }
    pathlib.Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
