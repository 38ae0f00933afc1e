#!/usr/bin/env python3
"""HTTP statuses of an overloaded or not-yet-ready coordinator: 503 (and /health 503)
while no worker group is ready, 429 in OpenAI's error shape when the replica's queue is
full, for unary and streamed requests alike (a stream's headers wait for admission).

    openai_overload_test.py --bin-dir BUILD/bin --model MODEL_DIR --log-dir DIR

Starts tessera-coordinator and tessera-worker itself (flags `tessera serve` does not pass).
Exits 77 (skipped) without the model.
"""

import argparse
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util  # noqa: E402

ARGS = None


def request(base, path, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


class OverloadTest(unittest.TestCase):
    # Coordinator flags of a test, beyond the default one-sequence, one-queued setup.
    EXTRA_FLAGS = {
        "test_client_not_reading_is_cancelled": ["--max-undelivered-tokens", "8", "--max-num-seqs", "4",
                                                 "--max-queued-requests", "0"],
        "test_drain_finishes_admitted_requests_and_refuses_new_ones": ["--max-queued-requests", "0"],
    }

    def setUp(self):
        self.procs = []
        self.http_port = serve_util.free_port()
        self.cluster_port = serve_util.free_port()
        self.metrics_port = serve_util.free_port()
        self.base = f"http://127.0.0.1:{self.http_port}"
        self.log = open(os.path.join(ARGS.log_dir, f"openai_overload_test.{self._testMethodName}.log"), "wb")
        self.procs.append(subprocess.Popen(
            [os.path.join(ARGS.bin_dir, "tessera-coordinator"), "--model", ARGS.model, "--port",
             str(serve_util.free_port()), "--cluster-port", str(self.cluster_port), "--http-port",
             str(self.http_port), "--metrics-port", str(self.metrics_port), "--kv-memory-mb", "16",
             "--max-num-seqs", "1", "--max-queued-requests", "1", "--insecure",
             *self.EXTRA_FLAGS.get(self._testMethodName, [])], stdout=self.log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 30
        while not serve_util.accepts(self.http_port):
            self.assertLess(time.monotonic(), deadline, "the HTTP port never opened")
            time.sleep(0.05)

    def tearDown(self):
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.log.close()

    def start_worker(self):
        self.procs.append(subprocess.Popen(
            [os.path.join(ARGS.bin_dir, "tessera-worker"), "--coordinator", f"127.0.0.1:{self.cluster_port}",
             "--threads", "1", "--metrics-port", "0", "--insecure"], stdout=self.log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 120
        while request(self.base, "/health")[0] != 200:
            self.assertLess(time.monotonic(), deadline, "never ready")
            time.sleep(0.1)

    def test_no_worker_group_is_503_then_ready(self):
        status, _, body = request(self.base, "/health")
        self.assertEqual(status, 503)
        self.assertEqual(json.loads(body)["error"]["type"], "service_unavailable")
        for stream in (False, True):
            status, ctype, body = request(self.base, "/v1/completions",
                                          {"prompt": "Once upon a time", "max_tokens": 4, "stream": stream})
            self.assertEqual(status, 503, body)
            self.assertIn("application/json", ctype)
            self.assertIn("no model replica is ready", json.loads(body)["error"]["message"])
        self.start_worker()
        status, _, body = request(self.base, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4})
        self.assertEqual(status, 200, body)

    def test_full_queue_is_429(self):
        self.start_worker()
        body = {"prompt": "Once upon a time", "max_tokens": 300, "ignore_eos": True}

        def one(i):
            return request(self.base, "/v1/completions", dict(body, stream=bool(i % 2)))

        with concurrent.futures.ThreadPoolExecutor(24) as pool:
            results = list(pool.map(one, range(24)))
        statuses = [r[0] for r in results]
        self.assertIn(200, statuses)
        self.assertIn(429, statuses)
        self.assertEqual(set(statuses), {200, 429}, statuses)
        for status, ctype, text in results:
            if status == 429:
                self.assertIn("application/json", ctype)
                err = json.loads(text)["error"]
                self.assertEqual(err["code"], "rate_limit_exceeded")
                self.assertIn("queue is full", err["message"])
            else:
                self.assertTrue(ctype.startswith("application/json") or text.endswith("data: [DONE]\n\n"), text[-200:])

    def metric(self, name, *labels):
        total = 0.0
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + "{") and all(l in line for l in labels):
                    total += float(line.rsplit(" ", 1)[1])
        return total

    def test_client_not_reading_is_cancelled(self):
        self.start_worker()
        # 20 logprobs make each event about 1 KB, far more than the socket buffers hold.
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 500, "ignore_eos": True, "logprobs": 20,
                           "stream": True}).encode()
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)  # A small window fills fast.
        s.connect(("127.0.0.1", self.http_port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        # Never read: the server's writes block, 8 tokens pile up, the engine gives up on
        # the request and the server drops the connection.
        deadline = time.monotonic() + 30
        while self.metric("tessera_aborted_requests_total", 'reason="client_not_reading"', 'protocol="http"') < 1:
            self.assertLess(time.monotonic(), deadline, "the request was not cancelled")
            time.sleep(0.05)
        while (self.metric("tessera_num_requests_running") > 0 or self.metric("tessera_kv_cache_usage_ratio") > 0):
            self.assertLess(time.monotonic(), deadline, "its KV blocks were not freed")
            time.sleep(0.05)
        s.close()
        # The server still serves.
        status, _, text = request(self.base, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 2})
        self.assertEqual(status, 200, text)

    def test_drain_finishes_admitted_requests_and_refuses_new_ones(self):
        self.start_worker()
        # Two requests of 500 tokens one after the other (--max-num-seqs 1): the drain has
        # about a second of work to wait for.
        body = {"prompt": "Once upon a time", "max_tokens": 500, "ignore_eos": True}
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            admitted = [pool.submit(request, self.base, "/v1/completions", dict(body, stream=bool(i % 2)))
                        for i in range(2)]
            time.sleep(0.1)
            self.procs[0].send_signal(signal.SIGTERM)
            time.sleep(0.05)
            status, _, text = request(self.base, "/v1/completions", body)
            self.assertEqual(status, 503, text)
            self.assertIn("draining", json.loads(text)["error"]["message"])
            self.assertEqual(request(self.base, "/health")[0], 503)
            for f in admitted:
                status, _, text = f.result()
                self.assertEqual(status, 200, text)
                self.assertTrue(text.endswith("data: [DONE]\n\n") or '"finish_reason":"length"' in text, text[-200:])
        self.assertEqual(self.procs[0].wait(timeout=30), 0)

def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--log-dir", required=True)
    ARGS, rest = p.parse_known_args()
    if not os.path.exists(os.path.join(ARGS.model, "model.safetensors")):
        print(f"SKIP: no model at {ARGS.model}")
        return 1 if os.environ.get("CI") == "true" else 77
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
