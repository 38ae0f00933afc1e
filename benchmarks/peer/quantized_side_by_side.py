#!/usr/bin/env python3
"""Quantized weights, Tessera against llama.cpp on the same weights, one run, A/B/A/B.

For each format pair, alternating the peer (A) and Tessera (B) `--reps` times:

  format  llama.cpp                      Tessera
  bf16    WORK/tl-bf16.gguf              WORK/tl-hf-bf16
  8-bit   Q8_0 (llama-quantize of bf16)  --quantization int8 of tl-hf-bf16
  4-bit   Q4_0 (llama-quantize of bf16)  GPTQ group 128 checkpoint of tl-hf-bf16
                                         (tests/worker/int4_checkpoint.py, round to nearest)

decode: `llama-bench -p 128 -n 64 -r 2` against two `tessera run` calls with a random
128-token prompt and 64 greedy tokens (as side_by_side.py). Both 8-bit formats hold 1.0625
bytes per weight (a 16-bit scale per 32); Q4_0 and GPTQ g128 4.5 bits (Q4_0: a 16-bit scale
per 32; GPTQ: a float scale and zero per 128).

  quantized_side_by_side.py --tessera-bin build/bin --peer-bin PEER/build/bin --work WORK \\
      --out-json F --out-md F
"""
import argparse
import datetime
import json
import pathlib
import random
import statistics
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from side_by_side import (DECODE_TOKENS, PROMPT_LEN, fmt_range, log, machine, random_ids,  # noqa: E402
                          ratios, run)

REPO = pathlib.Path(__file__).resolve().parents[2]


def prepare(a):
    w = a.work
    for q in ("Q8_0", "Q4_0"):
        out = w / f"tl-{q.lower()}.gguf"
        if not out.exists():
            log(f"llama-quantize {q}")
            run([a.peer_bin / "llama-quantize", w / "tl-bf16.gguf", out, q, a.threads])
    if not (w / "tl-gptq" / "model.safetensors").exists():
        log("GPTQ g128 checkpoint")
        run([sys.executable, REPO / "tests/worker/int4_checkpoint.py", "--src", w / "tl-hf-bf16",
             "--out", w / "tl-gptq", "--method", "gptq", "--group-size", 128])


def peer(a, gguf):
    out = run([a.peer_bin / "llama-bench", "-m", gguf, "-t", a.threads, "-p", PROMPT_LEN,
               "-n", DECODE_TOKENS, "-r", 2, "-o", "json"]).stdout
    rows = json.loads(out)
    pp = next(r for r in rows if r["n_prompt"] == PROMPT_LEN and r["n_gen"] == 0)
    tg = next(r for r in rows if r["n_gen"] == DECODE_TOKENS and r["n_prompt"] == 0)
    return {"prefill_tps": pp["avg_ts"], "decode_tps": tg["avg_ts"],
            "model_bytes": tg.get("model_size")}


def tessera(a, model, flags, rng):
    prefill, decode = [], []
    for _ in range(2):
        ids = ",".join(map(str, random_ids(PROMPT_LEN, rng)))
        out = run([a.tessera_bin / "tessera", "run", "--model", model, "--prompt-ids", ids,
                   "--max-tokens", DECODE_TOKENS, "--temperature", 0, "--ignore-eos",
                   "--threads", a.threads, "--json", "--quiet", *flags]).stdout
        t = json.loads(out)["timings"]
        prefill.append(PROMPT_LEN / t["prefill_seconds"])
        decode.append(t["decode_tokens_per_second"])
    return {"prefill_tps": statistics.mean(prefill), "decode_tps": statistics.mean(decode)}


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tessera-bin", type=pathlib.Path, required=True)
    p.add_argument("--peer-bin", type=pathlib.Path, required=True)
    p.add_argument("--peer-revision", default="unknown")
    p.add_argument("--work", type=pathlib.Path, required=True,
                   help="holds tl-bf16.gguf and tl-hf-bf16 (prepare_models.sh)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--formats", default="bf16,8bit,4bit")
    p.add_argument("--out-json", type=pathlib.Path, required=True)
    p.add_argument("--out-md", type=pathlib.Path, required=True)
    a = p.parse_args()
    prepare(a)
    w = a.work
    pairs = {
        "bf16": (w / "tl-bf16.gguf", w / "tl-hf-bf16", []),
        "8bit": (w / "tl-q8_0.gguf", w / "tl-hf-bf16", ["--quantization", "int8"]),
        "4bit": (w / "tl-q4_0.gguf", w / "tl-gptq", []),
    }
    formats = a.formats.split(",")
    rng = random.Random(1)
    git = lambda *args: subprocess.run(["git", *args], capture_output=True, text=True,
                                       cwd=REPO).stdout.strip()
    result = {"benchmark": "quantized_side_by_side",
              "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "machine": machine(), "threads": a.threads,
              "tessera": {"revision": git("rev-parse", "HEAD"),
                          "dirty": bool(git("status", "--porcelain"))},
              "peer": {"name": "llama.cpp", "revision": a.peer_revision},
              "model": "TinyLlama-1.1B-shaped random checkpoint, vocab 512 (prepare_models.sh)",
              "reps": []}
    for i in range(a.reps):
        rep = {}
        for f in formats:
            gguf, model, flags = pairs[f]
            log(f"rep {i + 1}/{a.reps} {f}: llama.cpp")
            theirs = peer(a, gguf)
            log(f"rep {i + 1}/{a.reps} {f}: Tessera")
            ours = tessera(a, model, flags, rng)
            rep[f] = {"peer": theirs, "tessera": ours}
            log(f"  decode {theirs['decode_tps']:.1f} vs {ours['decode_tps']:.1f} tok/s")
        result["reps"].append(rep)
    result["machine"]["load_average_at_end"] = __import__("os").getloadavg()
    a.out_json.write_text(json.dumps(result, indent=2) + "\n")
    names = {"bf16": "BF16 / BF16", "8bit": "Q8_0 / int8", "4bit": "Q4_0 / GPTQ g128"}
    lines = [f"Quantized decode and prefill, Tessera vs llama.cpp ({a.peer_revision[:10]}), "
             f"1B random model, {a.threads} threads, {result['date']}, {a.reps} A/B repetitions "
             f"(ranges over repetitions; ratio range over every pairing).", "",
             "| format (llama.cpp / Tessera) | figure | llama.cpp | Tessera | ratio |",
             "|---|---|---|---|---|"]
    for f in formats:
        for key, label in (("decode_tps", "batch-1 decode, tok/s"),
                           ("prefill_tps", f"prefill of {PROMPT_LEN}, tok/s")):
            t = [r[f]["tessera"][key] for r in result["reps"]]
            q = [r[f]["peer"][key] for r in result["reps"]]
            lo, hi = ratios(t, q)
            lines.append(f"| {names[f]} | {label} | {fmt_range(q)} | {fmt_range(t)} | "
                         f"{lo:.2f}-{hi:.2f}x |")
    if "bf16" in formats:
        lines += ["", "Tessera against its own BF16 (decode, every pairing):", ""]
        base = [r["bf16"]["tessera"]["decode_tps"] for r in result["reps"]]
        for f in formats:
            if f == "bf16":
                continue
            lo, hi = ratios([r[f]["tessera"]["decode_tps"] for r in result["reps"]], base)
            lines.append(f"- {names[f].split(' / ')[1]}: {lo:.2f}-{hi:.2f}x")
    a.out_md.write_text("\n".join(lines) + "\n")
    log(f"wrote {a.out_json} and {a.out_md}")


if __name__ == "__main__":
    main()
