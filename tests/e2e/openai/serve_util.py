"""`tessera serve` with its OpenAI-compatible HTTP API on free ports, for the e2e tests."""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

# A minimal chat template (stories260K has none): the model folder is copied by symlinks
# into a scratch folder with this chat_template.jinja beside it, so the chat endpoint has
# something to render once the chat-template library is part of the build.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


def smollm2_path() -> str:
    """Where scripts/setup.sh puts SmolLM2-135M-Instruct's GGUF (TESSERA_SMOLLM2_GGUF wins)."""
    if os.environ.get("TESSERA_SMOLLM2_GGUF"):
        return os.environ["TESSERA_SMOLLM2_GGUF"]
    cache = (os.environ.get("TESSERA_CACHE_DIR")
             or (os.path.join(os.environ["XDG_CACHE_HOME"], "tessera") if os.environ.get("XDG_CACHE_HOME")
                 else os.path.expanduser("~/.cache/tessera")))
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accepts(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:port right now."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def child_pids(pid: int):
    pids = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                pids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return pids


def model_with_chat_template(model_dir: str) -> str:
    """A scratch copy (symlinks) of `model_dir` with CHAT_TEMPLATE; same basename."""
    root = tempfile.mkdtemp(prefix="tessera-openai-")
    copy = os.path.join(root, os.path.basename(os.path.normpath(model_dir)))
    os.makedirs(copy)
    for name in os.listdir(model_dir):
        os.symlink(os.path.join(os.path.abspath(model_dir), name), os.path.join(copy, name))
    with open(os.path.join(copy, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)
    return copy


class Serve:
    """`tessera serve --http-port` on free ports; stop() ends it and its children."""

    def __init__(self, tessera, model, log_path, extra=()):
        self.port = free_port()
        self.cluster_port = free_port()
        self.http_port = free_port()
        # Worker i uses metrics_port + 1 + i: keep a gap from the others.
        self.metrics_port = free_port()
        self.base = f"http://127.0.0.1:{self.http_port}"
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [tessera, "serve", "--model", model, "--port", str(self.port), "--cluster-port",
             str(self.cluster_port), "--http-port", str(self.http_port), "--metrics-port",
             str(self.metrics_port), "--kv-memory-mb", "16", "--threads", "1",
             # Plaintext: these tests speak plain HTTP; the TLS default of serve is covered by
             # tests/e2e/cluster_tls_test.cc.
             "--insecure", *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.children = []

    def logs(self, tail=6000) -> str:
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()[-tail:]

    def wait_ready(self, timeout=180.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tessera serve exited with {self.proc.returncode}:\n{self.logs()}")
            self.children = child_pids(self.proc.pid) or self.children
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.children = child_pids(self.proc.pid)
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.base}/health not 200 after {timeout} s:\n{self.logs()}")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def metric_sum(self, name: str, must_contain=()) -> float:
        """Sum of the samples of `name` whose label set contains every string of `must_contain`."""
        total = 0.0
        for line in self.metrics().splitlines():
            m = re.match(rf"^{name}(\{{[^}}]*\}})? (\S+)$", line)
            if m and all(s in (m.group(1) or "") for s in must_contain):
                total += float(m.group(2))
        return total

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self.children:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"tessera-" in f.read():
                        os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.log.close()


def cleanup_model_copy(path: str):
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)
