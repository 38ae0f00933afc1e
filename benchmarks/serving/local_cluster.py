"""A coordinator and one tp-1 worker on 127.0.0.1, for the benchmark scripts beside this file,
and what those scripts share (the machine, /metrics sums, the generated 1B checkpoint).

    with LocalCluster(build_dir, model, ["--max-num-seqs", "32"], "tessera-overload-") as c:
        c.address, c.metrics_port, c.coordinator.pid, c.work (logs)
"""
import os
import pathlib
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def metric_sum(text, name, label=""):
    """Sum of the samples of `name` in a Prometheus text page whose labels contain `label`."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " ") and label in line.split("}")[0]:
            total += float(line.rsplit(" ", 1)[1])
    return total


def ensure_llama1b(bin_dir, model, program):
    """Generates the random-weight llama-1b BF16 checkpoint into `model` when it has none."""
    if any(pathlib.Path(model).glob("*.safetensors")):
        return
    print(f"{program}: generating llama-1b (bf16) into {model}", flush=True)
    subprocess.run([str(pathlib.Path(bin_dir) / "tessera"), "gen-checkpoint", "--preset", "llama-1b", "--dtype", "bf16",
                    "--out", str(model)], check=True)


def missing_model_exit_code(model, program):
    """None when `model` holds a checkpoint; else says so and returns the exit code: a
    failure under CI=true, the ctest skip code (77) elsewhere."""
    if (model / "model.safetensors").exists():
        return None
    print(f"{program}: model not found at {model}", file=sys.stderr)
    return 1 if os.environ.get("CI") in ("true", "1") else 77


class LocalCluster:
    def __init__(self, build_dir, model, coordinator_flags, work_prefix):
        self.bin_dir = pathlib.Path(build_dir) / "bin"
        self.model = model
        self.coordinator_flags = list(coordinator_flags)
        self.work = pathlib.Path(tempfile.mkdtemp(prefix=work_prefix))
        self.port, self.cluster_port, self.metrics_port = free_port(), free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.coordinator = self.worker = None

    def __enter__(self):
        self.coordinator = subprocess.Popen(
            [str(self.bin_dir / "tessera-coordinator"), "--model", str(self.model), "--port", str(self.port),
             "--cluster-port", str(self.cluster_port), "--metrics-port", str(self.metrics_port),
             "--insecure"]
            + self.coordinator_flags,
            stdout=open(self.work / "coordinator.log", "w"), stderr=subprocess.STDOUT)
        time.sleep(0.5)  # Let the cluster port open before the worker's first registration.
        self.worker = subprocess.Popen(
            [str(self.bin_dir / "tessera-worker"), "--coordinator", f"127.0.0.1:{self.cluster_port}",
             "--threads", "1", "--metrics-port", "0", "--insecure"],
            stdout=open(self.work / "worker.log", "w"), stderr=subprocess.STDOUT)
        return self

    def __exit__(self, *exc):
        for proc in (self.coordinator, self.worker):
            proc.terminate()
        for proc in (self.coordinator, self.worker):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        return False

    def metrics(self):
        return urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics").read().decode()

    def wait_ready(self, timeout_s):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            try:
                url = f"http://127.0.0.1:{self.metrics_port}/readyz"
                if urllib.request.urlopen(url, timeout=2).status == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.2)
        return False
