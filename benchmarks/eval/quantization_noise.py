#!/usr/bin/env python3
"""What each weight format costs stories260K's greedy choices, in a float64 numpy forward.

The quality gate (`tessera eval`) measures Tessera's kernels; this measures the formats
themselves, with nothing of Tessera's code but its tokenizer: the linear layers (q/k/v, o,
gate/up, down) of tests/reference/numpy_llama.py's forward are replaced by their
quantize-dequantize images and the teacher-forced argmax over the eval text is compared with
the float model's, window by window as `tessera eval` scores it (256 tokens, one shared).
It separates what a format can reach from what an implementation loses, and shows how much
of the gate on this tiny model is near-ties: the margins between the top two logits are
printed first.

Formats: int8 per output row and per 32 columns with the scale exact, rounded to FP16
(Tessera's) or rounded up to BF16 (its previous format); FP8 E4M3 per output row (Tessera's
load-time FP8 and the fp8 checkpoints); 4-bit with zero points per 32 / 128 columns, by
round-to-nearest and by GPTQ (Frantar et al. 2022: columns rounded in order, each error
spread over the columns not yet rounded through the inverse Hessian of the layer's inputs),
calibrated on a second text, never the scored one. FP8 through the same GPTQ update too.

Usage: quantization_noise.py [--model DIR] [--text FILE] [--calibration FILE] [--out JSON]
(needs numpy; tokenizes with build/bin/tessera tokenize).
"""

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import numpy_llama  # noqa: E402

LINEAR = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
CONTEXT = 256


def tokenize(model_dir, path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    out = subprocess.run([os.path.join(ROOT, "build", "bin", "tessera"), "tokenize", "--model",
                          model_dir, "--text", text, "--add-special-tokens", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["ids"]


def windows(ids):
    out, begin = [], 0
    while begin + 1 < len(ids):
        length = min(CONTEXT, len(ids) - begin)
        out.append(ids[begin:begin + length])
        begin += length - 1
    return out


def teacher_forced(model, ids):
    logits, targets = [], []
    for w in windows(ids):
        logits.append(model.forward(w)[:-1])
        targets += w[1:]
    return np.concatenate(logits), np.asarray(targets)


def perplexity(logits, targets):
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z[np.arange(len(targets)), targets] - np.log(np.exp(z).sum(axis=1))
    return math.exp(-logp.mean())


# --- number formats ---------------------------------------------------------------------

def f16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float64)


def bf16_up(x):
    bits = np.asarray(x, np.float32).view(np.uint32)
    bits = np.where((bits & 0xFFFF) != 0, (bits & 0xFFFF0000) + 0x10000, bits).astype(np.uint32)
    return bits.view(np.float32).astype(np.float64)


def fp8_e4m3(x):
    """Round to nearest E4M3 (3 mantissa bits, subnormals below 2^-6), saturating at 448."""
    x = np.clip(x, -448.0, 448.0)
    a = np.abs(x)
    exponent = np.maximum(np.floor(np.log2(np.maximum(a, 2.0**-9))), -6)
    step = 2.0 ** (exponent - 3)
    return np.sign(x) * np.round(a / step) * step


# A "grid" maps a [rows, cols] block of weights to a function rounding one of its columns:
# the scale (and zero) come from the whole block as it stands when the block is entered.

def int8_grid(scale_rounding):
    def grid(block):
        s = scale_rounding(np.abs(block).max(axis=1) / 127.0)
        s = np.where(s > 0, s, 1.0)
        return lambda col: np.clip(np.round(col / s), -127, 127) * s
    return grid


def fp8_row_grid(w):
    s = np.abs(w).max(axis=1) / 448.0
    s = np.where(s > 0, s, 1.0)
    return lambda block: (lambda col: fp8_e4m3(col / s) * s)


def int4_grid(block):
    """GPTQ/AWQ's asymmetric 4 bits: the range [min(w, 0), max(w, 0)] in 15 steps."""
    lo, hi = np.minimum(block.min(axis=1), 0.0), np.maximum(block.max(axis=1), 0.0)
    s = f16(np.maximum((hi - lo) / 15.0, 1e-8))
    zero = np.clip(np.round(-lo / s), 0, 15)
    return lambda col: (np.clip(np.round(col / s) + zero, 0, 15) - zero) * s


def round_to_nearest(w, grid, group):
    out = np.empty_like(w)
    for begin in range(0, w.shape[1], group):
        rounding = grid(w[:, begin:begin + group])
        for c in range(begin, min(begin + group, w.shape[1])):
            out[:, c] = rounding(w[:, c])
    return out


def gptq(w, inputs, grid, group, damp=0.01):
    """GPTQ without act-order: inputs [n, cols] are the layer's calibration inputs."""
    w = w.copy()
    h = 2.0 * inputs.T @ inputs
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h += damp * np.mean(np.diag(h)) * np.eye(h.shape[0])
    hinv = np.linalg.cholesky(np.linalg.inv(h)).T  # Upper Cholesky factor of H^-1.
    out = np.zeros_like(w)
    rounding = None
    for c in range(w.shape[1]):
        if c % group == 0:
            rounding = grid(w[:, c:c + group])
        out[:, c] = rounding(w[:, c])
        err = (w[:, c] - out[:, c]) / hinv[c, c]
        w[:, c + 1:] -= np.outer(err, hinv[c, c + 1:])
    return out


# --- the model ----------------------------------------------------------------------------

def linear_inputs(model, ids_list, layer):
    """Inputs of each linear layer of `layer` over the texts, for the model's current weights."""
    w, m = model.w, model
    collected = {}
    for ids in ids_list:
        seq = len(ids)
        pos = np.arange(seq)
        h = w["model.embed_tokens.weight"][np.asarray(ids)]
        causal = pos[None, :] <= pos[:, None]
        for l in range(layer + 1):
            p = f"model.layers.{l}."
            x = m.rms_norm(h, w[p + "input_layernorm.weight"])
            def heads(name, n):
                return (x @ w[p + f"self_attn.{name}_proj.weight"].T).reshape(
                    seq, n, m.head_dim).transpose(1, 0, 2)
            q, k, v = heads("q", m.n_heads), heads("k", m.n_kv), heads("v", m.n_kv)
            q, k = m.rope(q, pos), m.rope(k, pos)
            group = m.n_heads // m.n_kv
            k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
            scores = np.where(causal[None], q @ k.transpose(0, 2, 1) / math.sqrt(m.head_dim),
                              -np.inf)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            attn = (scores @ v).transpose(1, 0, 2).reshape(seq, -1)
            h = h + attn @ w[p + "self_attn.o_proj.weight"].T
            x2 = m.rms_norm(h, w[p + "post_attention_layernorm.weight"])
            gate = x2 @ w[p + "mlp.gate_proj.weight"].T
            act = gate / (1 + np.exp(-gate)) * (x2 @ w[p + "mlp.up_proj.weight"].T)
            if l == layer:
                for name, value in (("self_attn.q_proj", x), ("self_attn.k_proj", x),
                                    ("self_attn.v_proj", x), ("self_attn.o_proj", attn),
                                    ("mlp.gate_proj", x2), ("mlp.up_proj", x2),
                                    ("mlp.down_proj", act)):
                    collected.setdefault(name, []).append(value)
            h = h + act @ w[p + "mlp.down_proj.weight"].T
    return {name: np.concatenate(v) for name, v in collected.items()}


def quantized_weights(model, float_weights, method, grid_of, group, calibration):
    """A copy of the weights with every linear layer rounded; GPTQ goes layer by layer on
    the inputs the already-rounded layers below produce, as the reference implementation."""
    weights = dict(float_weights)
    layers = model.config["num_hidden_layers"]
    for l in range(layers):
        inputs = linear_inputs(model, calibration, l) if method == "gptq" else None
        for name in LINEAR:
            key = f"model.layers.{l}.{name}.weight"
            w = float_weights[key]
            grid = grid_of(w)
            g = w.shape[1] if group == 0 else group
            weights[key] = (gptq(w, inputs[name], grid, g) if method == "gptq"
                            else round_to_nearest(w, grid, g))
        model.w = weights  # The next layer's inputs come through the rounded ones.
    model.w = float_weights
    return weights


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=os.path.join(ROOT, "..", "shared", "models", "stories260K"))
    parser.add_argument("--text", default=os.path.join(ROOT, "benchmarks", "eval", "tiny_stories_style.txt"))
    parser.add_argument("--calibration", default=os.path.join(ROOT, "benchmarks", "eval", "stories_small.txt"),
                        help="GPTQ's calibration text (never the scored one)")
    parser.add_argument("--out", help="JSON results file")
    args = parser.parse_args(argv)

    model = numpy_llama.Model(args.model)
    float_weights = model.w
    scored = tokenize(args.model, args.text)
    calibration = windows(tokenize(args.model, args.calibration))
    base, targets = teacher_forced(model, scored)
    top2 = np.sort(base, axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    base_ppl = perplexity(base, targets)
    result = {
        "what": "stories260K greedy choices under weight formats, float64 numpy forward",
        "model": os.path.abspath(args.model), "text": os.path.relpath(args.text, ROOT),
        "calibration": os.path.relpath(args.calibration, ROOT), "positions": len(targets),
        "top2_margin_below": {str(t): int((margin < t).sum()) for t in (0.01, 0.03, 0.1, 0.3)},
        "baseline_perplexity": base_ppl, "formats": [],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": platform.processor() or platform.machine(),
    }
    print(f"{len(targets)} positions; top-2 margins below 0.01/0.03/0.1/0.3 logits: "
          + "/".join(str(v) for v in result["top2_margin_below"].values()), flush=True)

    exact = int8_grid(lambda s: s)
    formats = [
        ("int8 per row, exact scale", "rtn", lambda w: exact, 0),
        ("int8 per 32, exact scale", "rtn", lambda w: exact, 32),
        ("int8 per 32, FP16 scale (tessera)", "rtn", lambda w: int8_grid(f16), 32),
        ("int8 per 32, BF16 scale rounded up (previous)", "rtn", lambda w: int8_grid(bf16_up), 32),
        ("fp8 e4m3 per row (tessera, fp8 checkpoints)", "rtn", fp8_row_grid, 0),
        ("fp8 e4m3 per row, GPTQ", "gptq", fp8_row_grid, 0),
        ("int4 per 32, round to nearest", "rtn", lambda w: int4_grid, 32),
        ("int4 per 32, GPTQ", "gptq", lambda w: int4_grid, 32),
        ("int4 per 128, round to nearest", "rtn", lambda w: int4_grid, 128),
        ("int4 per 128, GPTQ", "gptq", lambda w: int4_grid, 128),
    ]
    for name, method, grid_of, group in formats:
        model.w = quantized_weights(model, float_weights, method, grid_of, group, calibration)
        logits, _ = teacher_forced(model, scored)
        model.w = float_weights
        flips = int((logits.argmax(axis=1) != base.argmax(axis=1)).sum())
        ppl_increase = perplexity(logits, targets) / base_ppl - 1
        result["formats"].append({"format": name, "flips": flips,
                                  "top1_agreement": 1 - flips / len(targets),
                                  "ppl_increase": ppl_increase,
                                  "max_abs_logit_diff": float(np.abs(logits - base).max())})
        print(f"{name:48s} flips {flips:4d}  top-1 {100 * (1 - flips / len(targets)):6.2f}%  "
              f"perplexity {100 * ppl_increase:+.2f}%", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
