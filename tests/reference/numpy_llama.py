#!/usr/bin/env python3
"""A plain numpy forward pass of the Llama family, the correctness oracle for Tessera.

Reads a Hugging Face folder (config.json + *.safetensors) and follows transformers'
modeling code: embedding, RMSNorm, q/k/v projections (+ biases), Qwen3's per-head q/k
RMSNorm, rotate-half RoPE with the rope_scaling types of modeling_rope_utils.py,
grouped-query causal attention with optional sliding window, SiLU MLP or a mixture of SiLU
experts (Mixtral, Qwen2-MoE with its gated shared expert, Qwen3-MoE), tied or separate
lm_head. Everything runs in float64 except the RoPE angle, which transformers forms in
float32 (position * inv_freq) and so do we. Greedy decoding recomputes the whole sequence
each step (no KV cache): slow, but nothing it shares with an incremental engine can hide a
bug. scripts/reference/check_numpy_reference.py checks this file against transformers.

Usage: numpy_llama.py --model DIR --prompt-ids 1,2,3 --max-new-tokens N --out FILE.json
  [--no-renormalize] [--no-qk-norm] [--router-stats]
The two --no-* switches break the model on purpose (never renormalise the top-k router
probabilities; skip Qwen3's q/k norm), so that a test can show it notices.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
_QWEN = ("Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM")


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


def head_dim_of(config):
    """config's head_dim; without one, hidden / heads, except Qwen3Config's default of 128."""
    if config.get("head_dim"):
        return config["head_dim"]
    if (config.get("architectures") or [""])[0] == "Qwen3ForCausalLM":
        return 128
    return config["hidden_size"] // config["num_attention_heads"]


def rope_frequencies(config):
    """(inv_freq [head_dim/2] float32, attention_scaling) as transformers computes them."""
    head_dim = head_dim_of(config)
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
    """Per-layer sliding window (0: full attention), as transformers (5.25) decides it."""
    layers = config["num_hidden_layers"]
    arch = (config.get("architectures") or ["LlamaForCausalLM"])[0]
    window = config.get("sliding_window")
    if arch in ("MistralForCausalLM", "MixtralForCausalLM") and window:
        return [window] * layers
    if arch not in _QWEN or not config.get("use_sliding_window") or not window:
        return [0] * layers
    if arch == "Qwen3MoeForCausalLM":
        # Qwen3MoeAttention takes config.sliding_window on every layer; no layer_types.
        return [window] * layers
    types = config.get("layer_types")
    if types is None:
        first = config.get("max_window_layers", 28)
        if arch == "Qwen2MoeForCausalLM":
            # Qwen2MoeConfig: the even layers below max_window_layers (sic).
            types = ["sliding_attention" if (i + 1) % 2 and i < first else "full_attention"
                     for i in range(layers)]
        else:
            types = ["sliding_attention" if i >= first else "full_attention"
                     for i in range(layers)]
    return [window if t == "sliding_attention" else 0 for t in types]


def moe_config(config, arch):
    """The mixture-of-experts fields of transformers' *SparseMoeBlock, or None (dense).

    Mixtral: every layer sparse, top-k always renormalised, experts
    block_sparse_moe.experts.E.w1/w3/w2 (gate/up/down). Qwen2-MoE and Qwen3-MoE: layer l
    sparse iff (l + 1) % decoder_sparse_step == 0 and l not in mlp_only_layers, top-k
    renormalised iff norm_topk_prob, experts mlp.experts.E.gate_proj/up_proj/down_proj;
    Qwen2-MoE adds a shared expert scaled by sigmoid(shared_expert_gate . x).
    """
    layers = config["num_hidden_layers"]
    if arch == "MixtralForCausalLM":
        return {
            "num_experts": config["num_local_experts"],
            "top_k": config["num_experts_per_tok"],
            "renormalize": True,
            "sparse": [True] * layers,
            "prefix": "block_sparse_moe.",
            "names": ("w1", "w3", "w2"),
            "shared_expert": False,
        }
    if arch in ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"):
        step = config.get("decoder_sparse_step") or 1
        dense = set(config.get("mlp_only_layers") or [])
        return {
            "num_experts": config["num_experts"],
            "top_k": config["num_experts_per_tok"],
            "renormalize": bool(config.get("norm_topk_prob", False)),
            "sparse": [(l + 1) % step == 0 and l not in dense for l in range(layers)],
            "prefix": "mlp.",
            "names": ("gate_proj", "up_proj", "down_proj"),
            "shared_expert": arch == "Qwen2MoeForCausalLM",
        }
    return None


def silu_mlp(x, gate_w, up_w, down_w):
    gate = x @ gate_w.T
    return (gate / (1 + np.exp(-gate)) * (x @ up_w.T)) @ down_w.T


class Model:
    def __init__(self, model_dir, renormalize=True, qk_norm=True):
        """`renormalize` False never renormalises the router's top-k probabilities and
        `qk_norm` False skips Qwen3's q/k norm: both only to break the model in tests."""
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        c = self.config
        self.w = load_weights(model_dir)
        self.n_heads = c["num_attention_heads"]
        self.n_kv = c.get("num_key_value_heads") or self.n_heads
        self.head_dim = head_dim_of(c)
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.inv_freq, self.attention_scaling = rope_frequencies(c)
        self.windows = layer_windows(c)
        arch = (c.get("architectures") or ["LlamaForCausalLM"])[0]
        # Qwen2: q/k/v biases always (Qwen2-MoE: its "qkv_bias" field, default true), never
        # on o; Mistral/Mixtral: none; Llama and Qwen3(-MoE): "attention_bias" gives all four.
        if arch in ("Qwen2ForCausalLM", "Qwen2MoeForCausalLM"):
            self.qkv_bias = arch == "Qwen2ForCausalLM" or bool(c.get("qkv_bias", True))
            self.o_bias = False
        elif arch in ("MistralForCausalLM", "MixtralForCausalLM"):
            self.qkv_bias = self.o_bias = False
        else:
            self.qkv_bias = self.o_bias = bool(c.get("attention_bias"))
        self.qk_norm = qk_norm and arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")
        self.moe = moe_config(c, arch)
        if self.moe is not None and not renormalize:
            self.moe["renormalize"] = False
        # The smallest gap between the router logits of the k-th and the (k+1)-th expert
        # seen so far (a tie there would make the expert choice depend on rounding), and
        # how many token choices each expert got.
        self.min_topk_margin = math.inf
        self.expert_counts = None if self.moe is None else np.zeros(self.moe["num_experts"], int)
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
            if self.qk_norm:  # Qwen3: over each head, after the bias, before RoPE.
                q = self.rms_norm(q, w[p + "self_attn.q_norm.weight"])
                k = self.rms_norm(k, w[p + "self_attn.k_norm.weight"])
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
            if self.moe is not None and self.moe["sparse"][l]:
                h = h + self.sparse_moe(x, p)
            else:
                h = h + silu_mlp(x, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                                 w[p + "mlp.down_proj.weight"])
        return self.rms_norm(h, w["model.norm.weight"]) @ self.lm_head.T

    def route(self, x, router_weight):
        """(expert ids [tokens, k], weights [tokens, k]) as transformers' routers choose:
        softmax over the router logits, the top k in descending probability with ties to
        the lower expert id, renormalised to sum 1 when the model says so."""
        top_k = self.moe["top_k"]
        logits = x @ router_weight.T
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        # A stable sort of the negated probabilities keeps equal ones in id order.
        order = np.argsort(-probs, axis=-1, kind="stable")
        ids = order[:, :top_k]
        weights = np.take_along_axis(probs, ids, axis=-1)
        if top_k < probs.shape[-1]:
            kth = np.take_along_axis(logits, order[:, top_k - 1:top_k], axis=-1)
            next_best = np.take_along_axis(logits, order[:, top_k:top_k + 1], axis=-1)
            self.min_topk_margin = min(self.min_topk_margin, float((kth - next_best).min()))
        self.expert_counts += np.bincount(ids.ravel(), minlength=probs.shape[-1])
        if self.moe["renormalize"]:
            weights = weights / weights.sum(axis=-1, keepdims=True)
        return ids, weights

    def sparse_moe(self, x, p):
        """The mixture-of-experts MLP of layer prefix `p` over x [tokens, hidden]."""
        w, m = self.w, self.moe
        block = p + m["prefix"]
        ids, weights = self.route(x, w[block + "gate.weight"])
        gate_name, up_name, down_name = m["names"]
        out = np.zeros_like(x)
        for e in range(m["num_experts"]):
            rows, slots = np.nonzero(ids == e)
            if rows.size == 0:
                continue
            expert = block + f"experts.{e}."
            y = silu_mlp(x[rows], w[expert + f"{gate_name}.weight"], w[expert + f"{up_name}.weight"],
                         w[expert + f"{down_name}.weight"])
            out[rows] += weights[rows, slots][:, None] * y
        if m["shared_expert"]:
            shared = p + "mlp.shared_expert."
            y = silu_mlp(x, w[shared + "gate_proj.weight"], w[shared + "up_proj.weight"],
                         w[shared + "down_proj.weight"])
            gate = x @ w[p + "mlp.shared_expert_gate.weight"].T  # [tokens, 1]
            out += y / (1 + np.exp(-gate))
        return out

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
    parser.add_argument("--no-renormalize", action="store_true",
                        help="never renormalise the top-k router probabilities (a broken "
                        "model, for negative tests)")
    parser.add_argument("--no-qk-norm", action="store_true",
                        help="skip Qwen3's q/k norm (a broken model, for negative tests)")
    parser.add_argument("--router-stats", action="store_true",
                        help="print to stderr the smallest gap between the router logits of "
                        "the k-th and the next expert (a near tie makes the choice fragile) "
                        "and how often each expert was chosen")
    args = parser.parse_args(argv)
    prompt = [int(t) for t in args.prompt_ids.split(",") if t]
    model = Model(args.model, renormalize=not args.no_renormalize, qk_norm=not args.no_qk_norm)
    generated, logits = model.greedy(prompt, args.max_new_tokens)
    if args.router_stats and model.moe is not None:
        print(f"min top-k router logit margin: {model.min_topk_margin:.6g}; expert choices: "
              f"{model.expert_counts.tolist()}", file=sys.stderr)
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
