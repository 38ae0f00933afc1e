#!/usr/bin/env python3
"""500 concurrent SSE streams against `tessera serve`'s /v1/completions, each on its own
connection (asyncio, raw sockets: no client library between the test and the bytes).
Every stream must end with `data: [DONE]`; prints the wall time.

    sse_load_test.py --tessera BUILD/bin/tessera --model MODEL_DIR --log-dir DIR
        [--streams 500] [--max-tokens 8] [--limit-seconds 60]

Exits 77 (skipped) without the model.
"""

import argparse
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util  # noqa: E402


async def one_stream(port, body, results, index):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        await writer.drain()
        data = await reader.read()  # Connection: close: the server closes after the last chunk.
    finally:
        writer.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1] if head else b"?"
    # Chunked transfer coding: the events are inside; [DONE] is the last one.
    results[index] = (status, payload.count(b"data: {"), b"data: [DONE]\n\n" in payload, data[-200:])


async def run(port, streams, max_tokens):
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens, "ignore_eos": True,
                       "temperature": 0, "stream": True}).encode()
    results = [None] * streams
    await asyncio.gather(*(one_stream(port, body, results, i) for i in range(streams)))
    return results


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tessera", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--log-dir", required=True)
    p.add_argument("--streams", type=int, default=500)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--limit-seconds", type=float, default=60)
    args = p.parse_args()
    if not os.path.exists(os.path.join(args.model, "model.safetensors")):
        print(f"SKIP: no model at {args.model}")
        return 1 if os.environ.get("CI") == "true" else 77
    server = serve_util.Serve(args.tessera, args.model, os.path.join(args.log_dir, "sse_load_test.serve.log"),
                              extra=["--max-num-seqs", "256"])
    try:
        server.wait_ready()
        start = time.monotonic()
        results = asyncio.run(run(server.http_port, args.streams, args.max_tokens))
        seconds = time.monotonic() - start
        bad = [(i, r) for i, r in enumerate(results) if r[0] != b"200" or not r[2] or r[1] < 1]
        print(f"{args.streams} concurrent SSE streams of {args.max_tokens} tokens: {seconds:.2f} s, "
              f"{len(bad)} incomplete")
        for i, r in bad[:5]:
            print(f"  stream {i}: status {r[0]}, {r[1]} events, [DONE] {r[2]}, tail {r[3]!r}")
        if bad:
            print(server.logs())
            return 1
        if seconds > args.limit_seconds:
            print(f"FAIL: slower than {args.limit_seconds} s")
            return 1
        running = server.metric_sum("tessera_num_requests_running")
        if running != 0:
            print(f"FAIL: {running} requests still running after every stream ended")
            return 1
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
