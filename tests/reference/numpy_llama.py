#!/usr/bin/env python3
"""A plain numpy forward pass of the Llama family, the correctness oracle for Tessera.

Reads a Hugging Face folder (config.json + *.safetensors) and follows transformers'
modeling code: embedding, RMSNorm, q/k/v projections (+ biases), rotate-half RoPE with the
rope_scaling types of modeling_rope_utils.py, grouped-query causal attention with optional
sliding window, SiLU MLP, tied or separate lm_head. Everything runs in float64 except the
RoPE angle, which transformers forms in float32 (position * inv_freq) and so do we.
Greedy decoding recomputes the whole sequence each step (no KV cache): slow, but nothing
it shares with an incremental engine can hide a bug.

Usage: numpy_llama.py --model DIR --prompt-ids 1,2,3 --max-new-tokens N --out FILE.json
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def load_safetensors(path):
    """Returns {name: float64 array} for one .safetensors file (F32, F16, BF16)."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            array = bits.view(np.float32)
        elif info["dtype"] in _DTYPES:
            array = np.frombuffer(raw, dtype=_DTYPES[info["dtype"]])
        else:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        tensors[name] = array.astype(np.float64).reshape(info["shape"])
    return tensors


def load_weights(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        weights.update(load_safetensors(os.path.join(model_dir, name)))
    return weights


def rope_frequencies(config):
    """(inv_freq [head_dim/2] float32, attention_scaling) as transformers computes them."""
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if config.get("partial_rotary_factor", 1.0) not in (None, 1.0):
        raise ValueError("partial_rotary_factor != 1 is not modelled")
    base = float(config.get("rope_theta", 10000.0))
    max_pos = config.get("max_position_embeddings", 2048)
    scaling = config.get("rope_scaling") or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    dim = head_dim
    exponents = np.arange(0, dim, 2, dtype=np.float64) / dim
    attention = 1.0
    if rope_type == "default":
        inv = 1.0 / base**exponents
    elif rope_type == "linear":
        inv = 1.0 / base**exponents / scaling["factor"]
    elif rope_type == "dynamic":
        # Static NTK for a context of max_position_embeddings * factor (vLLM's choice; see
        # common/rope.h): transformers' formula evaluated at that sequence length.
        factor = scaling["factor"]
        seq_len = max_pos * factor
        base = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
        inv = 1.0 / base**exponents
    elif rope_type == "llama3":
        inv = 1.0 / base**exponents
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_len = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv = np.where(medium, smoothed, scaled)
    elif rope_type == "yarn":
        factor = scaling["factor"]
        original = scaling.get("original_max_position_embeddings") or max_pos

        def get_mscale(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        attention = scaling.get("attention_factor")
        if attention is None:
            mscale, mscale_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
            if mscale and mscale_all:
                attention = get_mscale(factor, mscale) / get_mscale(factor, mscale_all)
            else:
                attention = get_mscale(factor)
        beta_fast = scaling.get("beta_fast") or 32
        beta_slow = scaling.get("beta_slow") or 1

        def correction_dim(rotations):
            return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

        lo, hi = correction_dim(beta_fast), correction_dim(beta_slow)
        if scaling.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
        extrapolation = 1 - ramp
        pos_freqs = base**exponents
        inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    else:
        raise ValueError(f"unsupported rope_type {rope_type!r}")
    return inv.astype(np.float32), float(attention)


def layer_windows(config):
    """Per-layer sliding window (0: full attention), as transformers decides it."""
    layers = config["num_hidden_layers"]
    arch = (config.get("architectures") or ["LlamaForCausalLM"])[0]
    window = config.get("sliding_window")
    if arch == "MistralForCausalLM" and window:
        return [window] * layers
    if arch == "Qwen2ForCausalLM" and config.get("use_sliding_window") and window:
        first = config.get("max_window_layers", 28)
        return [window if i >= first else 0 for i in range(layers)]
    return [0] * layers


class Model:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        c = self.config
        self.w = load_weights(model_dir)
        self.n_heads = c["num_attention_heads"]
        self.n_kv = c.get("num_key_value_heads") or self.n_heads
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.n_heads
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.inv_freq, self.attention_scaling = rope_frequencies(c)
        self.windows = layer_windows(c)
        arch = (c.get("architectures") or ["LlamaForCausalLM"])[0]
        self.qkv_bias = arch == "Qwen2ForCausalLM" or bool(c.get("attention_bias"))
        self.o_bias = arch != "Qwen2ForCausalLM" and bool(c.get("attention_bias"))
        if "lm_head.weight" in self.w and not c.get("tie_word_embeddings", False):
            self.lm_head = self.w["lm_head.weight"]
        else:
            self.lm_head = self.w["model.embed_tokens.weight"]

    def rms_norm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def rope(self, x, positions):
        # x [heads, seq, head_dim]. The angle is a float32 product, as in transformers.
        angles = positions.astype(np.float32)[:, None] * self.inv_freq[None, :]
        angles = np.concatenate([angles, angles], axis=-1).astype(np.float64)
        cos = np.cos(angles) * self.attention_scaling
        sin = np.sin(angles) * self.attention_scaling
        half = self.head_dim // 2
        rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rotated * sin

    def forward(self, ids):
        """Logits [len(ids), vocab] for every position."""
        w = self.w
        seq = len(ids)
        positions = np.arange(seq)
        h = w["model.embed_tokens.weight"][np.asarray(ids)]
        # mask[q, k]: k visible from q.
        causal = positions[None, :] <= positions[:, None]
        for l, window in enumerate(self.windows):
            p = f"model.layers.{l}."
            x = self.rms_norm(h, w[p + "input_layernorm.weight"])
            proj = {}
            for name in ("q", "k", "v"):
                y = x @ w[p + f"self_attn.{name}_proj.weight"].T
                if self.qkv_bias:
                    y = y + w[p + f"self_attn.{name}_proj.bias"]
                proj[name] = y
            q = proj["q"].reshape(seq, self.n_heads, self.head_dim).transpose(1, 0, 2)
            k = proj["k"].reshape(seq, self.n_kv, self.head_dim).transpose(1, 0, 2)
            v = proj["v"].reshape(seq, self.n_kv, self.head_dim).transpose(1, 0, 2)
            q, k = self.rope(q, positions), self.rope(k, positions)
            group = self.n_heads // self.n_kv
            k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
            mask = causal
            if window:
                mask = causal & (positions[None, :] > positions[:, None] - window)
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(self.head_dim)
            scores = np.where(mask[None], scores, -np.inf)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            attn = (scores @ v).transpose(1, 0, 2).reshape(seq, -1)
            out = attn @ w[p + "self_attn.o_proj.weight"].T
            if self.o_bias:
                out = out + w[p + "self_attn.o_proj.bias"]
            h = h + out
            x = self.rms_norm(h, w[p + "post_attention_layernorm.weight"])
            gate = x @ w[p + "mlp.gate_proj.weight"].T
            up = x @ w[p + "mlp.up_proj.weight"].T
            h = h + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
        return self.rms_norm(h, w["model.norm.weight"]) @ self.lm_head.T

    def greedy(self, prompt_ids, max_new_tokens):
        """(generated ids, logits of each step [max_new_tokens, vocab])."""
        ids = list(prompt_ids)
        steps = []
        for _ in range(max_new_tokens):
            logits = self.forward(ids)[-1]
            steps.append(logits)
            ids.append(int(np.argmax(logits)))
        return ids[len(prompt_ids):], np.stack(steps)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="Hugging Face model folder")
    parser.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    prompt = [int(t) for t in args.prompt_ids.split(",") if t]
    model = Model(args.model)
    generated, logits = model.greedy(prompt, args.max_new_tokens)
    result = {
        "what": "numpy reference (tests/reference/numpy_llama.py) greedy continuation",
        "model": os.path.abspath(args.model),
        "prompt_ids": prompt,
        "generated_ids": generated,
        # Logits before each generated token: step 0 is the prompt's last position.
        "step_logits": logits.astype(np.float32).tolist(),
    }
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
