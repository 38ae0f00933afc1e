#!/usr/bin/env python3
"""Merges serve_bench.sh's per-point records into one results JSON and a Markdown table
beside the anchors and the issue's targets (standard library only).

  serve_bench_summary.py --work-dir D --out-stem S ...   writes S.json and S.md, prints S.md
  serve_bench_summary.py --brief S.json                  the targets in a few lines
"""
import argparse
import datetime
import glob
import json
import os
import subprocess
import sys

SCHEMA = "tessera-serving-bench/v1"

# Published figures on one H200 (issue 34). Ours sit beside them with the nearest point we
# measure, named as such where the conditions differ.
ANCHORS = [
    {"id": "trtllm_fp8_128_128", "what": "TensorRT-LLM, Llama 3.1 8B FP8, one H200, 128/128, max throughput",
     "value": 27911, "unit": "output tok/s"},
    {"id": "trtllm_fp8_1000_1000", "what": "TensorRT-LLM, Llama 3.1 8B FP8, one H200, 1,000/1,000, max throughput",
     "value": 17744, "unit": "output tok/s"},
    {"id": "vllm_latency", "what": "vLLM nightly latency, 8B, 32 in / 128 out, batch 8, H200",
     "value": 833, "unit": "ms end to end"},
    {"id": "bf16_batch1_bound", "what": "batch-1 BF16 decode bound for 8B on an H200 (16 GB a token over 4.8 TB/s)",
     "value": 299, "unit": "tok/s"},
]
# The done-when targets, for an H200.
TARGETS = [
    {"id": "batch1_tpot", "what": "batch-1 decode TPOT p50, BF16, 128/128, concurrency 1",
     "phase": "bf16", "shape": (128, 128), "concurrency": 1, "limit": 4.5, "unit": "ms", "le": True},
    {"id": "bf16_c256", "what": "output tok/s, BF16, 128/128, concurrency 256",
     "phase": "bf16", "shape": (128, 128), "concurrency": 256, "limit": 15000, "unit": "tok/s", "le": False},
    {"id": "fp8_c256", "what": "output tok/s, FP8 weights + FP8 KV, 128/128, concurrency 256",
     "phase": "fp8", "shape": (128, 128), "concurrency": 256, "limit": 20000, "unit": "tok/s", "le": False},
    {"id": "graph_replay", "what": "decode forward passes replaying a CUDA graph (every point)",
     "limit": 0.95, "unit": "share", "le": False},
]


def load(pattern):
    out = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            out.append(json.load(f))
    return out


def probe_gpu():
    """nvidia-smi's first GPU, for runs where no point wrote tessera-bench's machine record."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    fields = [f.strip() for f in out.stdout.splitlines()[0].split(",")] if out.stdout.strip() else []
    return dict(zip(("name", "driver", "memory"), fields)) if len(fields) == 3 else None


def probe_cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def parameters(cfg):
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or h // heads
    layer = h * hd * (2 * heads + 2 * kv) + 3 * h * inter + 2 * h
    head = 0 if cfg.get("tie_word_embeddings") else v * h
    return v * h + cfg["num_hidden_layers"] * layer + h + head


def find(points, phase, shape, c):
    for p in points:
        if p["phase"] == phase and (p["input_len"], p["output_len"]) == shape and p["concurrency"] == c:
            return p
    return None


def measured(p):
    return p is not None and p["status"] == "ok" and p.get("metrics")


def graph_totals(points, phase=None):
    replayed = total = 0
    seen = False
    for p in points:
        if (phase and p["phase"] != phase) or not p.get("forward_passes"):
            continue
        seen = True
        decode = p["forward_passes"].get("decode", {})
        replayed += decode.get("replayed", 0)
        total += sum(decode.values())
    if not seen:
        return None
    return {"replayed": replayed, "decode_passes": total,
            "share": replayed / total if total else None}


def evaluate_targets(points, graphs):
    out = []
    for t in TARGETS:
        row = {k: t[k] for k in ("id", "what", "limit", "unit")}
        if t["id"] == "graph_replay":
            share = graphs["share"] if graphs else None
            row["value"] = share
            row["detail"] = ("the counter tessera_worker_forward_passes_total is absent" if graphs is None
                             else f"{graphs['replayed']:,} of {graphs['decode_passes']:,} decode passes")
        else:
            p = find(points, t["phase"], t["shape"], t["concurrency"])
            if not measured(p):
                row["value"] = None
                row["detail"] = ("not in this grid" if p is None else
                                 f"{p['status']}: {p.get('reason') or ''}".strip())
            elif t["unit"] == "ms":
                row["value"] = p["metrics"]["tpot_ms"].get("p50")
                row["detail"] = f"p99 {p['metrics']['tpot_ms'].get('p99', 0):.2f} ms"
            else:
                row["value"] = p["metrics"]["output_token_throughput_tps"]
                row["detail"] = f"{p['num_requests']} requests"
        v = row["value"]
        row["pass"] = None if v is None else (v <= t["limit"] if t["le"] else v >= t["limit"])
        out.append(row)
    return out


def best(points, phase, shape):
    ok = [p for p in points if p["phase"] == phase and (p["input_len"], p["output_len"]) == shape and measured(p)]
    return max(ok, key=lambda p: p["metrics"]["output_token_throughput_tps"]) if ok else None


def evaluate_anchors(points):
    rows = []
    for a in ANCHORS:
        row = dict(a)
        ours = None
        if a["id"] == "trtllm_fp8_128_128":
            p = best(points, "fp8", (128, 128))
            if p:
                tps = p["metrics"]["output_token_throughput_tps"]
                ours = f"FP8 128/128, best at concurrency {p['concurrency']}: {tps:,.0f} tok/s ({100 * tps / a['value']:.0f} %)"
        elif a["id"] == "trtllm_fp8_1000_1000":
            p = best(points, "bf16", (2048, 2048))
            if p:
                tps = p["metrics"]["output_token_throughput_tps"]
                ours = (f"no 1,000/1,000 point; BF16 2,048/2,048 at concurrency {p['concurrency']}: "
                        f"{tps:,.0f} tok/s (longer and BF16, so not like for like)")
        elif a["id"] == "vllm_latency":
            p = find(points, "bf16", (128, 128), 16)
            if measured(p):
                ours = (f"no 32/128 batch-8 point; BF16 128/128 at concurrency 16: E2E p50 "
                        f"{p['metrics']['e2e_ms']['p50']:,.0f} ms (4x the prompt, 2x the batch)")
        elif a["id"] == "bf16_batch1_bound":
            p = find(points, "bf16", (128, 128), 1)
            if measured(p) and p["metrics"]["tpot_ms"].get("p50"):
                tps = 1000 / p["metrics"]["tpot_ms"]["p50"]
                ours = f"BF16 128/128 at concurrency 1: 1000 / TPOT p50 = {tps:,.0f} tok/s ({100 * tps / a['value']:.0f} % of the bound)"
        row["tessera"] = ours or "not measured in this run"
        rows.append(row)
    return rows


def ms(d, key):
    v = (d or {}).get(key)
    return "-" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.2f}" if v < 10 else f"{v:.1f}")


def markdown(result):
    lines = []
    g = result.get("gpu") or {}
    lines.append(f"# Tessera serving benchmark, {result['date']}")
    lines.append("")
    device = f"{g['name']} (driver {g.get('driver', '?')}, {g.get('memory', '?')})" if g else result.get("cpu", "?")
    lines.append(f"- device: {device}; backend `{result['device']}`, tp 1")
    lines.append(f"- commit: {result['commit']} (source tree `{result.get('source_version') or '?'}`)")
    m = result["model"]
    cfg = m.get("config", {})
    lines.append(f"- model: `tessera gen-checkpoint {m['gen_args']}` (random weights), "
                 f"{m.get('parameters', 0) / 1e9:.2f} B parameters, {cfg.get('num_hidden_layers')} layers, "
                 f"hidden {cfg.get('hidden_size')}, {cfg.get('num_attention_heads')} heads / "
                 f"{cfg.get('num_key_value_heads')} KV heads, vocabulary {cfg.get('vocab_size')}")
    for ph in result["phases"]:
        if ph.get("status") != "ok":
            lines.append(f"- {ph['phase']}: **{ph.get('status')}** after {ph.get('start_s', '?')} s: {ph.get('reason')}")
            continue
        c = ph.get("config", {})
        w = ph.get("worker", {})
        weights = c.get("quantization", "?")
        weights = f"{c.get('dtype', '?')} (the checkpoint's)" if weights == "none" else f"{weights} (from {c.get('dtype', '?')} at load)"
        lines.append(f"- {ph['phase']}: weights {weights}, "
                     f"KV cache {c.get('kv_cache_dtype', '?')}, activations {w.get('activation_dtype', '?')}, "
                     f"{ph.get('kv_blocks', '?')} KV blocks of {c.get('block_size', '?')}; "
                     f"ready in {ph.get('start_s', '?')} s")
    lines.append(f"- tessera-bench: random token prompts, `ignore_eos`, all requests at once under the "
                 f"concurrency cap, warm-up requests not counted; budget {result['budget_s']} s, "
                 f"took {result['elapsed_s']} s (checkpoint {result['gen_checkpoint_s']} s)")
    lines.append("")
    lines.append("| weights / KV | in / out | conc. | requests | output tok/s | TTFT p50 / p99 ms | "
                 "TPOT p50 / p99 ms | ITL p50 / p99 ms | decode graphs | note |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for p in result["points"]:
        dt = "BF16 / BF16" if p["phase"] == "bf16" else "FP8 / FP8" if p["phase"] == "fp8" else p["phase"]
        mt = p.get("metrics")
        share = p.get("decode_graph_replay_share")
        note = "" if p["status"] == "ok" else f"{p['status']}: {p.get('reason') or ''}"
        if p.get("preemptions"):
            note = (note + "; " if note else "") + f"{p['preemptions']} preemptions"
        if mt:
            lines.append(
                f"| {dt} | {p['input_len']:,} / {p['output_len']:,} | {p['concurrency']} | "
                f"{p['num_requests']} (+{p['warmup']}) | {mt['output_token_throughput_tps']:,.0f} | "
                f"{ms(mt['ttft_ms'], 'p50')} / {ms(mt['ttft_ms'], 'p99')} | "
                f"{ms(mt['tpot_ms'], 'p50')} / {ms(mt['tpot_ms'], 'p99')} | "
                f"{ms(mt['itl_ms'], 'p50')} / {ms(mt['itl_ms'], 'p99')} | "
                f"{'n/a' if share is None else f'{100 * share:.1f} %'} | {note} |")
        else:
            lines.append(f"| {dt} | {p['input_len']:,} / {p['output_len']:,} | {p['concurrency']} | "
                         f"{p['num_requests']} (+{p['warmup']}) | - | - | - | - | - | {note} |")
    lines.append("")
    on_h200 = "H200" in (g.get("name") or "")
    lines.append("Targets (issue 34, for one H200" +
                 ("" if on_h200 else f"; this run is on {g.get('name') or result.get('cpu', 'a CPU')}, "
                  "so the pass/fail column only shows where it stands") + "):")
    lines.append("")
    lines.append("| target | goal | measured | result |")
    lines.append("|---|---|---|---|")
    for t in result["targets"]:
        goal = ("<= " if t["id"] == "batch1_tpot" else ">= ") + (
            f"{100 * t['limit']:.0f} %" if t["unit"] == "share" else f"{t['limit']:,} {t['unit']}")
        v = t["value"]
        val = ("-" if v is None else f"{100 * v:.1f} %" if t["unit"] == "share" else
               f"{v:.2f} ms" if t["unit"] == "ms" else f"{v:,.0f} tok/s")
        res = "n/a" if t["pass"] is None else "pass" if t["pass"] else "**miss**"
        lines.append(f"| {t['what']} | {goal} | {val} ({t['detail']}) | {res} |")
    lines.append("")
    lines.append("Anchors (published figures; not run here):")
    lines.append("")
    lines.append("| anchor | figure | Tessera in this run |")
    lines.append("|---|---|---|")
    for a in result["anchors"]:
        lines.append(f"| {a['what']} | {a['value']:,} {a['unit']} | {a['tessera']} |")
    return "\n".join(lines) + "\n"


def brief(result):
    counts = {}
    for p in result["points"]:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    out = [", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + " points"]
    for t in result["targets"]:
        v = t["value"]
        val = ("-" if v is None else f"{100 * v:.1f} %" if t["unit"] == "share" else
               f"{v:.2f} ms" if t["unit"] == "ms" else f"{v:,.0f} tok/s")
        if v is None:
            out.append(f"{t['what']}: {t['detail']}")
            continue
        goal = ("<= " if t["id"] == "batch1_tpot" else ">= ") + (
            f"{100 * t['limit']:.0f} %" if t["unit"] == "share" else f"{t['limit']:,}")
        out.append(f"{t['what']}: {val} (goal {goal}: {'pass' if t['pass'] else 'MISS'})")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brief", metavar="RESULT_JSON")
    ap.add_argument("--work-dir")
    ap.add_argument("--out-stem")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--gen-args", default="")
    ap.add_argument("--gen-s", type=float, default=0)
    ap.add_argument("--budget-s", type=float, default=0)
    ap.add_argument("--elapsed-s", type=float, default=0)
    args = ap.parse_args()
    if args.brief:
        with open(args.brief) as f:
            print(brief(json.load(f)))
        return 0
    if not args.work_dir or not args.out_stem:
        ap.error("--work-dir and --out-stem are required (or --brief)")

    points = load(os.path.join(args.work_dir, "point-*.json"))
    phases = load(os.path.join(args.work_dir, "phase-*.json"))
    phases.sort(key=lambda ph: ["bf16", "fp8"].index(ph["phase"]) if ph["phase"] in ("bf16", "fp8") else 9)
    if not points:
        print(f"serve_bench_summary: no point records in {args.work_dir}", file=sys.stderr)
        return 1
    with open(os.path.join(args.work_dir, "model_config.json")) as f:
        cfg = json.load(f)
    cond = next((p["conditions"] for p in points if p.get("conditions")), {})
    machine = cond.get("machine", {})
    gpus = machine.get("gpus") or []
    graphs = graph_totals(points)
    result = {
        "schema": SCHEMA,
        "date": cond.get("date") or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": args.device,
        "gpu": gpus[0] if gpus else (probe_gpu() if args.device == "cuda" else None),
        "cpu": machine.get("cpu_model") or probe_cpu(),
        "commit": args.commit,
        "source_version": (cond.get("build") or {}).get("version"),
        "build_type": (cond.get("build") or {}).get("build_type"),
        "model": {"gen_args": args.gen_args, "config": cfg, "parameters": parameters(cfg),
                  "served_as": cond.get("model"), "max_context": cond.get("max_context")},
        "budget_s": args.budget_s,
        "elapsed_s": args.elapsed_s,
        "gen_checkpoint_s": args.gen_s,
        "phases": phases,
        "points": points,
        "decode_graph_replay": {"all": graphs, "bf16": graph_totals(points, "bf16"),
                                "fp8": graph_totals(points, "fp8")},
        "targets": evaluate_targets(points, graphs),
        "anchors": evaluate_anchors(points),
    }
    with open(args.out_stem + ".json", "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    md = markdown(result)
    with open(args.out_stem + ".md", "w") as f:
        f.write(md)
    print(md, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
