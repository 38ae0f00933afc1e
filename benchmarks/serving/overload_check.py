#!/usr/bin/python3
"""Overload check (issue 12, item 3): a cluster with bounded queues under twice the load it
can serve answers every request with a terminal status, finishes every request it admits,
and counts every refusal in its metrics.

1. Starts tessera-coordinator (--max-queued-requests, --max-num-seqs) and one tessera-worker
   on 127.0.0.1 with the given model (stories260K by default).
2. Measures saturation with tessera-bench: --saturation-requests sent all at once under a
   concurrency cap; its completed requests per second is the saturation rate.
3. Sends --requests at --rate-factor x that rate (Poisson arrivals).
4. Checks: every request ended (completed + failed == sent), every failure is
   RESOURCE_EXHAUSTED, every completed request got all its tokens, and the coordinator's
   tessera_rejected_requests_total{reason="queue_full"} equals the refusals seen.
Writes one JSON (conditions from tessera-bench, both runs' metrics, the checks) to --out.
Exit status 0 when every check holds.

Usage: overload_check.py --build-dir BUILD [--model DIR] [--out FILE]
"""
import argparse
import json
import pathlib
import subprocess
import sys

from local_cluster import LocalCluster, missing_model_exit_code


def metric(text, name, label):
    for line in text.splitlines():
        if line.startswith(name + "{") and label in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def run_bench(bin_dir, address, out, args):
    cmd = [str(bin_dir / "tessera-bench"), "--address", address, "--out", str(out), "--no-progress",
           "--wait-ready-s", "120"] + args
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def main():
    source = pathlib.Path(__file__).resolve().parents[2]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", required=True, type=pathlib.Path)
    p.add_argument("--model", type=pathlib.Path, default=source.parent / "shared" / "models" / "stories260K")
    p.add_argument("--out", type=pathlib.Path, help="JSON result (default: a temporary file)")
    p.add_argument("--requests", type=int, default=10000)
    p.add_argument("--rate-factor", type=float, default=2.0)
    p.add_argument("--saturation-requests", type=int, default=1000)
    p.add_argument("--input-len", type=int, default=16)
    p.add_argument("--output-len", type=int, default=16)
    p.add_argument("--max-num-seqs", type=int, default=32)
    p.add_argument("--max-queued-requests", type=int, default=32)
    p.add_argument("--senders", type=int, default=256, help="tessera-bench --max-concurrency")
    a = p.parse_args()

    missing = missing_model_exit_code(a.model, "overload_check")
    if missing is not None:
        return missing
    bin_dir = a.build_dir / "bin"
    flags = ["--kv-memory-mb", "64", "--max-num-seqs", str(a.max_num_seqs),
             "--max-queued-requests", str(a.max_queued_requests)]
    with LocalCluster(a.build_dir, a.model, flags, "tessera-overload-") as cluster:
        work, address = cluster.work, cluster.address
        common = ["--input-len", str(a.input_len), "--output-len", str(a.output_len), "--timeout-s", "120",
                  "--max-concurrency", str(a.senders)]
        saturation = run_bench(bin_dir, address, work / "saturation.json",
                               common + ["--num-requests", str(a.saturation_requests), "--request-rate", "0",
                                         "--max-concurrency", str(a.max_num_seqs)])
        sat_rps = saturation["metrics"]["request_throughput_rps"]
        before = cluster.metrics()
        rate = a.rate_factor * sat_rps
        overload = run_bench(bin_dir, address, work / "overload.json",
                             common + ["--num-requests", str(a.requests), "--request-rate", f"{rate:.3f}",
                                       "--warmup", "0", "--seed", "1"])
        after = cluster.metrics()

    m = overload["metrics"]
    refused_seen = m["failures_by_code"].get("RESOURCE_EXHAUSTED", 0)
    refused_counted = (metric(after, "tessera_rejected_requests_total", 'reason="queue_full"')
                       - metric(before, "tessera_rejected_requests_total", 'reason="queue_full"'))
    checks = {
        "every_request_terminal": m["completed"] + m["failed"] == a.requests,
        "failures_are_resource_exhausted": set(m["failures_by_code"]) <= {"RESOURCE_EXHAUSTED"},
        "admitted_requests_finish_whole": m["output_len_mismatches"] == 0
        and m["total_output_tokens"] == m["completed"] * a.output_len,
        "refusals_counted_in_metrics": refused_counted == refused_seen,
        "overload_was_real": refused_seen > 0,
    }
    result = {
        "schema": "tessera-overload-check/v1",
        "conditions": dict(overload["conditions"], max_num_seqs=a.max_num_seqs,
                           max_queued_requests=a.max_queued_requests, senders=a.senders),
        "saturation": {"requests": a.saturation_requests, "request_throughput_rps": sat_rps,
                       "e2e_ms": saturation["metrics"]["e2e_ms"]},
        "overload": {"offered_rate_rps": rate, "rate_factor": a.rate_factor, "requests": a.requests,
                     "completed": m["completed"], "failed": m["failed"],
                     "failures_by_code": m["failures_by_code"],
                     "refused_counted_by_coordinator": refused_counted,
                     "completed_throughput_rps": m["request_throughput_rps"], "duration_s": m["duration_s"],
                     "ttft_ms": m["ttft_ms"], "e2e_ms": m["e2e_ms"]},
        "checks": checks,
    }
    out = a.out or work / "overload_check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saturation {sat_rps:.1f} req/s; offered {rate:.1f} req/s x {a.requests}: "
          f"{m['completed']} completed, {m['failed']} failed {m['failures_by_code']}, "
          f"coordinator counted {refused_counted:.0f} refusals; result in {out}")
    failed = [k for k, ok in checks.items() if not ok]
    if failed:
        print("FAIL: " + ", ".join(failed), file=sys.stderr)
        print((work / "coordinator.log").read_text()[-3000:], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
