#!/usr/bin/env python3
"""Front-door scale benchmark: many concurrent GenerateStream calls on stories260K.

1. Starts tessera-coordinator (tp 1, --max-concurrent-streams and --max-num-seqs raised
   to hold every stream, KV memory for all of them) and one tessera-worker, on loopback.
2. Waits for /readyz, then runs tessera-front-door-bench: --streams calls opened at once
   with the gRPC callback client, --max-new-tokens each.
3. Writes the bench's JSON (coordinator threads and RSS from /proc, p50/p99 TTFT,
   failures, machine and build) plus the coordinator's flags to --out.

Exits 0 when every stream ended OK, 2 when some did not, 77 when the model is missing
(1 under CI=true).

Usage: front_door_bench.py --build-dir BUILD [--model DIR] [--streams N] [--out FILE]
"""
import argparse
import json
import pathlib
import subprocess
import sys

from local_cluster import LocalCluster, missing_model_exit_code


def main():
    source = pathlib.Path(__file__).resolve().parents[2]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", required=True, type=pathlib.Path)
    p.add_argument("--model", type=pathlib.Path, default=source.parent / "shared" / "models" / "stories260K")
    p.add_argument("--out", type=pathlib.Path, help="JSON result (default: stdout only)")
    p.add_argument("--streams", type=int, default=5000)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--channels", type=int, default=8)
    p.add_argument("--kv-memory-mb", type=int, default=256)
    p.add_argument("--deadline-s", type=int, default=180)
    a = p.parse_args()
    missing = missing_model_exit_code(a.model, "front_door_bench")
    if missing is not None:
        return missing
    bin_dir = a.build_dir / "bin"
    coordinator_flags = ["--max-concurrent-streams", str(a.streams + 100), "--max-num-seqs", str(a.streams),
                         "--max-num-batched-tokens", "16384", "--kv-memory-mb", str(a.kv_memory_mb)]
    with LocalCluster(a.build_dir, a.model, coordinator_flags, "tessera-front-door-") as cluster:
        if not cluster.wait_ready(120):
            print(f"front_door_bench: coordinator not ready; logs in {cluster.work}", file=sys.stderr)
            return 1
        out = cluster.work / "result.json"
        # The machine may be shared: the 1-minute load when the run starts says how much.
        load_before = float(pathlib.Path("/proc/loadavg").read_text().split()[0])
        bench = subprocess.run(
            [str(bin_dir / "tessera-front-door-bench"), "--address", cluster.address, "--coordinator-pid",
             str(cluster.coordinator.pid), "--streams", str(a.streams), "--channels", str(a.channels),
             "--max-new-tokens", str(a.max_new_tokens), "--deadline-s", str(a.deadline_s), "--out", str(out)],
            stdout=subprocess.DEVNULL)
        if not out.exists():
            print(f"front_door_bench: the bench wrote no result (exit {bench.returncode})", file=sys.stderr)
            return 1
        result = json.loads(out.read_text())
    result["conditions"]["model"] = a.model.name
    result["conditions"]["tp"] = 1
    result["conditions"]["coordinator_flags"] = coordinator_flags
    result["conditions"]["worker_threads"] = 1
    result["conditions"]["loadavg_1m_before"] = load_before
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    return 0 if result["metrics"]["failures"] == 0 else 2


if __name__ == "__main__":
    sys.exit(main())
