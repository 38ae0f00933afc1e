#!/usr/bin/env python3
"""Tessera against llama.cpp on the same weights, same machine, one run, A/B/A/B.

Runs the three comparisons of shared/peer/README.md, alternating the peer (A) and Tessera
(B) `--reps` times, and writes a JSON result (every sample, the machine, both builds) and
a Markdown table of ratios (Tessera / peer, worst and best pairing of the repetitions).

  side_by_side.py --tessera-bin build/bin --peer-bin PEER/build/bin \
      --hf-model WORK/tl-hf-bf16 --gguf WORK/tl-bf16.gguf --out-json F --out-md F

1. decode and prefill: `llama-bench -p 128 -n 64` against `tessera run` with a 128-token
   prompt and 64 greedy tokens (prefill tok/s = 128 / prefill time; decode tok/s).
2. serving: `llama-server -np 32 -cb` (POST /completion) against `tessera serve --tp 1`
   (`tessera-bench`), 32 random prompt ids in, 32 tokens out (ignore_eos), greedy, at
   each concurrency, max(4, 2 x concurrency) requests.
3. Tessera's roofline: `tessera-roofline --batch 1` (best read bandwidth, achieved).
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import pathlib
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

PROMPT_LEN, DECODE_TOKENS = 128, 64
SERVE_IN, SERVE_OUT = 32, 32


def log(msg):
    print(f"[side-by-side {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, **kw)


# Random prompt ids come from [3, vocab_size), as tessera-bench draws them (ids below 3 are
# the llama2.c specials); vocab_size is the model's config.json one (512 for the llama2.c
# model: 3..511 as before). main() sets it.
VOCAB_SIZE = 512


def random_ids(n, rng):
    return [rng.randint(3, VOCAB_SIZE - 1) for _ in range(n)]


# ---- 1. decode and prefill


def peer_bench(a):
    out = run([a.peer_bin / "llama-bench", "-m", a.gguf, "-t", a.threads, "-p", PROMPT_LEN,
               "-n", DECODE_TOKENS, "-r", 2, "-o", "json"]).stdout
    rows = json.loads(out)
    pp = next(r for r in rows if r["n_prompt"] == PROMPT_LEN and r["n_gen"] == 0)
    tg = next(r for r in rows if r["n_gen"] == DECODE_TOKENS and r["n_prompt"] == 0)
    return {"prefill_tps": pp["avg_ts"], "decode_tps": tg["avg_ts"],
            "prefill_samples": pp.get("samples_ts"), "decode_samples": tg.get("samples_ts")}


def tessera_run(a, rng):
    # Two runs, as llama-bench's -r 2: the mean of each figure.
    prefill, decode = [], []
    for _ in range(2):
        ids = ",".join(map(str, random_ids(PROMPT_LEN, rng)))
        out = run([a.tessera_bin / "tessera", "run", "--model", a.hf_model, "--prompt-ids", ids,
                   "--max-tokens", DECODE_TOKENS, "--temperature", 0, "--ignore-eos",
                   "--threads", a.threads, "--json", "--quiet"]).stdout
        t = json.loads(out)["timings"]
        prefill.append(PROMPT_LEN / t["prefill_seconds"])
        decode.append(t["decode_tokens_per_second"])
    return {"prefill_tps": statistics.mean(prefill), "decode_tps": statistics.mean(decode),
            "prefill_samples": prefill, "decode_samples": decode}


# ---- 2. serving


def wait_http(url, proc, timeout_s):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} while starting")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not ready after {timeout_s} s")


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def peer_serving(a, concurrencies, rng, work):
    port = free_port()
    proc = subprocess.Popen(
        [str(a.peer_bin / "llama-server"), "-m", str(a.gguf), "-t", str(a.threads), "-c", "8192",
         "-np", "32", "-cb", "--host", "127.0.0.1", "--port", str(port)],
        stdout=open(work / "llama-server.log", "w"), stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, 300)

        retries = []

        def one(prompt):
            body = json.dumps({"prompt": prompt, "n_predict": SERVE_OUT, "ignore_eos": True,
                               "temperature": 0, "cache_prompt": False}).encode()
            # llama-server now and then resets a connection when 32 arrive at once: retry
            # (twice at most) and record it rather than lose the whole run.
            for attempt in range(3):
                req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=600) as r:
                        return json.loads(r.read())["tokens_predicted"]
                except ConnectionError as e:
                    if attempt == 2 or proc.poll() is not None:
                        raise
                    retries.append(repr(e))
                    time.sleep(0.5)

        results = {}
        one(random_ids(SERVE_IN, rng))  # Warm-up, as tessera-bench's --warmup 1.
        for c in concurrencies:
            n = max(4, 2 * c)
            prompts = [random_ids(SERVE_IN, rng) for _ in range(n)]
            start = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(max_workers=c) as pool:
                tokens = sum(pool.map(one, prompts))
            wall = time.perf_counter() - start
            results[c] = {"output_tps": tokens / wall, "requests": n, "output_tokens": tokens,
                          "wall_seconds": wall, "retried_requests": len(retries)}
            retries.clear()
            log(f"  peer c={c}: {tokens / wall:.1f} output tok/s")
        return results
    finally:
        stop(proc)


def tessera_serving(a, concurrencies, work):
    port = free_port()
    proc = subprocess.Popen(
        [str(a.tessera_bin / "tessera"), "serve", "--model", str(a.hf_model), "--tp", "1",
         "--threads", str(a.threads), "--port", str(port), "--metrics-port", "0", "--http-port", "0",
         "--insecure"],  # Plaintext, as llama-server runs.
        stdout=open(work / "tessera-serve.log", "w"), stderr=subprocess.STDOUT)
    try:
        results = {}
        for c in concurrencies:
            n = max(4, 2 * c)
            out = work / f"tessera_c{c}.json"
            run([a.tessera_bin / "tessera-bench", "--address", f"127.0.0.1:{port}",
                 "--num-requests", n, "--max-concurrency", c, "--input-len", SERVE_IN,
                 "--output-len", SERVE_OUT, "--warmup", 1, "--wait-ready-s", 300,
                 "--no-progress", "--out", out, "--seed", c])
            r = json.loads(out.read_text())
            tps = r["metrics"]["output_token_throughput_tps"]
            results[c] = {"output_tps": tps, "requests": n}
            log(f"  tessera c={c}: {tps:.1f} output tok/s")
        return results
    finally:
        stop(proc)


# ---- report


def machine():
    info = {"hostname": platform.node(), "kernel": platform.release(), "cores": os.cpu_count()}
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split()
        info["avx512_bf16"] = "avx512_bf16" in flags
    except (OSError, StopIteration):
        pass
    info["load_average_at_start"] = os.getloadavg()
    return info


def ratios(ours, theirs):
    """Tessera / peer over every pairing of repetitions: (min, max)."""
    r = [o / t for o in ours for t in theirs if t > 0]
    return (min(r), max(r)) if r else (0.0, 0.0)


def fmt_range(values, digits=1):
    lo, hi = min(values), max(values)
    return f"{lo:.{digits}f}" if abs(hi - lo) < 10 ** -digits else f"{lo:.{digits}f}-{hi:.{digits}f}"


def write_markdown(result, path):
    reps = result["reps"]
    lines = [f"Tessera vs llama.cpp ({result['peer']['revision'][:10]}), {result['model']['name']}, "
             f"{result['threads']} threads, {result['date']}, {len(reps)} A/B repetitions "
             f"(ranges over repetitions; ratio range over every pairing).", "",
             "| figure | llama.cpp | Tessera | ratio |", "|---|---|---|---|"]
    for key, label in (("decode_tps", "batch-1 decode, tok/s"),
                       ("prefill_tps", f"prefill of {PROMPT_LEN} tokens, tok/s")):
        p = [r["peer"]["bench"][key] for r in reps]
        t = [r["tessera"]["bench"][key] for r in reps]
        lo, hi = ratios(t, p)
        lines.append(f"| {label} | {fmt_range(p)} | {fmt_range(t)} | {lo:.2f}-{hi:.2f}x |")
    for c in result["concurrency"]:
        p = [r["peer"]["serving"][str(c)]["output_tps"] for r in reps]
        t = [r["tessera"]["serving"][str(c)]["output_tps"] for r in reps]
        lo, hi = ratios(t, p)
        lines.append(f"| serving, {c} streams, output tok/s | {fmt_range(p)} | {fmt_range(t)} | "
                     f"{lo:.2f}-{hi:.2f}x |")
    roof = result.get("tessera_roofline")
    if roof:
        lines += ["", f"Tessera batch-1 roofline: {roof['summary']}"]
    path.write_text("\n".join(lines) + "\n")


def roofline(a, work):
    out = work / "roofline.json"
    run([a.tessera_bin / "tessera-roofline", "--model", a.hf_model, "--batch", 1,
         "--threads", a.threads, "--out", out])
    return json.loads(out.read_text())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tessera-bin", type=pathlib.Path, required=True)
    p.add_argument("--peer-bin", type=pathlib.Path, required=True)
    p.add_argument("--peer-revision", default="unknown")
    p.add_argument("--hf-model", type=pathlib.Path, required=True)
    p.add_argument("--gguf", type=pathlib.Path, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--concurrency", default="1,4,16,32")
    p.add_argument("--skip-serving", action="store_true")
    p.add_argument("--model-name", default="random llama2.c, TinyLlama-1.1B dims (hidden 2048, inter 5632, "
                   "22 layers, 32 heads, 4 KV heads, vocab 512), BF16 both sides",
                   help="the model's description in the results")
    p.add_argument("--out-json", type=pathlib.Path, required=True)
    p.add_argument("--out-md", type=pathlib.Path, required=True)
    a = p.parse_args()
    concurrencies = [int(c) for c in a.concurrency.split(",")]
    global VOCAB_SIZE
    if a.hf_model.is_file():  # A GGUF file both engines serve (SmolLM2): its embedding's rows.
        import gguf
        embed = next(t for t in gguf.GGUFReader(str(a.hf_model)).tensors if t.name == "token_embd.weight")
        VOCAB_SIZE = int(embed.shape[1])
    else:
        VOCAB_SIZE = int(json.loads((a.hf_model / "config.json").read_text())["vocab_size"])
    work = pathlib.Path(tempfile.mkdtemp(prefix="tessera-peer-"))
    rng = random.Random(1)
    git = lambda *args: subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()
    result = {
        "benchmark": "side_by_side", "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(), "threads": a.threads, "concurrency": concurrencies,
        "model": {"name": a.model_name, "hf": str(a.hf_model), "gguf": str(a.gguf),
                  "vocab_size": VOCAB_SIZE, "prompt_ids": f"uniform in [3, {VOCAB_SIZE})"},
        "tessera": {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "-uno"))},
        "peer": {"name": "llama.cpp", "revision": a.peer_revision},
        "conditions": {"prompt_len": PROMPT_LEN, "decode_tokens": DECODE_TOKENS, "serve_in": SERVE_IN,
                       "serve_out": SERVE_OUT, "requests_per_point": "max(4, 2 x concurrency)",
                       "order": "A/B/A/B: peer then Tessera, each repetition"},
        "reps": [],
    }
    for rep in range(a.reps):
        log(f"repetition {rep + 1}/{a.reps}: llama-bench")
        entry = {"peer": {"bench": peer_bench(a)}, "tessera": {}}
        log(f"  peer: decode {entry['peer']['bench']['decode_tps']:.1f}, prefill {entry['peer']['bench']['prefill_tps']:.1f} tok/s")
        log("  tessera run")
        entry["tessera"]["bench"] = tessera_run(a, rng)
        log(f"  tessera: decode {entry['tessera']['bench']['decode_tps']:.1f}, prefill {entry['tessera']['bench']['prefill_tps']:.1f} tok/s")
        if not a.skip_serving:
            log("  llama-server")
            entry["peer"]["serving"] = {str(k): v for k, v in peer_serving(a, concurrencies, rng, work).items()}
            log("  tessera serve")
            entry["tessera"]["serving"] = {str(k): v for k, v in tessera_serving(a, concurrencies, work).items()}
        result["reps"].append(entry)
    if a.skip_serving:
        result["concurrency"] = []
    log("tessera-roofline")
    roof = roofline(a, work)
    summary = (f"{roof['achieved_bytes_per_second'] / 1e9:.1f} GB/s achieved against "
               f"{roof['bandwidth']['ceiling_bytes_per_second'] / 1e9:.1f} GB/s best read "
               f"(before or between the steps): "
               f"{100 * roof['roofline_fraction']:.0f} % of the roofline "
               f"({100 * roof['paired_roofline_fraction']:.0f} % against the read paired with each step); "
               f"{roof['decode_tokens_per_second']:.1f} tok/s")
    result["tessera_roofline"] = {"raw": roof, "summary": summary}
    result["machine"]["load_average_at_end"] = os.getloadavg()
    a.out_json.write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(result, a.out_md)
    print(a.out_md.read_text())


if __name__ == "__main__":
    main()
