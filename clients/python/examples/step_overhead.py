#!/usr/bin/python3
"""Measures the coordinator's per-step overhead: decode time per token seen by a request
minus the workers' forward time per step.

    step_overhead.py --bin BUILD/bin --model MODEL_DIR [--tp 1 2 4] [--tokens 200] [--runs 3]

For each tp it starts tessera-coordinator + tp tessera-worker processes (1 kernel thread
each, metrics on), runs `runs` greedy generations of `tokens` tokens one at a time, and
reads:
  - per token: (total_seconds - time_to_first_token_seconds) / (tokens - 1) from the
    response timings (the coordinator's clock: every decode step of one sequence);
  - forward: rank 0's tessera_worker_forward_seconds (sum / count over the same steps,
    collectives included);
  - handler: rank 0's tessera_worker_step_duration_seconds{phase="decode"} (ExecuteStep
    wall time: unpacking the step, forward, sampling).
overhead = per token - forward; of it, handler - forward is spent in the worker around
the forward, the rest in the coordinator loop, the step RPC and its fan-out.
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tessera_client  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listens on {port}")


def scrape(port):
    """name{labels} -> value for every sample of one /metrics page."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) ([-+0-9.eE]+|NaN|[+-]Inf)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def sample(metrics, name, **labels):
    for key, value in metrics.items():
        if key == name or key.startswith(name + "{"):
            if all(f'{k}="{v}"' in key for k, v in labels.items()):
                return value
    return 0.0


def measure(args, tp, log_dir):
    port, cluster_port, cmetrics = free_port(), free_port(), free_port()
    procs = [subprocess.Popen([os.path.join(args.bin, "tessera-coordinator"), "--model", args.model, "--port",
                               str(port), "--cluster-port", str(cluster_port), "--tp", str(tp),
                               "--kv-memory-mb", "16", "--metrics-port", str(cmetrics), "--insecure"],
                              stdout=open(os.path.join(log_dir, f"tp{tp}-coordinator.log"), "wb"),
                              stderr=subprocess.STDOUT)]
    try:
        wait_listening(cluster_port)
        worker_ports = []
        for w in range(tp):
            worker_ports.append(free_port())
            procs.append(subprocess.Popen(
                [os.path.join(args.bin, "tessera-worker"), "--coordinator", f"127.0.0.1:{cluster_port}",
                 "--threads", "1", "--rank-hint", str(w), "--metrics-port", str(worker_ports[-1]), "--insecure"],
                stdout=open(os.path.join(log_dir, f"tp{tp}-worker{w}.log"), "wb"), stderr=subprocess.STDOUT))
        wait_listening(port)
        client = tessera_client.TesseraClient(f"127.0.0.1:{port}", stubs_dir=args.stubs)
        client.wait_ready(120)
        greedy = dict(max_tokens=args.tokens, temperature=0, ignore_eos=True)
        client.generate("Once upon a time", **greedy)  # Warm-up.
        rank0 = None
        for p in worker_ports:
            if sample(scrape(p), "tessera_worker_info", rank="0") == 1:
                rank0 = p
        before = scrape(rank0)
        per_token = []
        for _ in range(args.runs):
            done = client.generate("Once upon a time", **greedy)
            per_token.append((done.timings["total_seconds"] - done.timings["time_to_first_token_seconds"])
                             / (len(done.token_ids) - 1))
        after = scrape(rank0)
        client.close()

        def mean(name, **labels):
            count = sample(after, name + "_count", **labels) - sample(before, name + "_count", **labels)
            total = sample(after, name + "_sum", **labels) - sample(before, name + "_sum", **labels)
            return total / count if count else float("nan"), int(count)

        forward, steps = mean("tessera_worker_forward_seconds")
        handler, _ = mean("tessera_worker_step_duration_seconds", phase="decode")
        token = sum(per_token) / len(per_token)
        return token, forward, handler, steps
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", required=True, help="folder of tessera-coordinator and tessera-worker")
    p.add_argument("--model", required=True)
    p.add_argument("--tp", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--stubs", default=tessera_client.DEFAULT_STUBS_DIR)
    args = p.parse_args()
    log_dir = tempfile.mkdtemp(prefix="tessera-step-overhead-")
    print(f"{'tp':>3} {'per token ms':>13} {'forward ms':>11} {'handler ms':>11} {'overhead ms':>12} "
          f"{'coord+rpc ms':>13} {'steps':>6}")
    for tp in args.tp:
        token, forward, handler, steps = measure(args, tp, log_dir)
        print(f"{tp:>3} {token * 1e3:>13.3f} {forward * 1e3:>11.3f} {handler * 1e3:>11.3f} "
              f"{(token - forward) * 1e3:>12.3f} {(token - handler) * 1e3:>13.3f} {steps:>6}")
    print(f"(logs in {log_dir})")


if __name__ == "__main__":
    main()
