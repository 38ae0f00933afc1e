#!/usr/bin/env python3
"""Checks tests/reference/numpy_llama.py against Hugging Face transformers itself.

The numpy forward is the oracle of Tessera's model tests; this script is its oracle. It
writes tiny random checkpoints of every architecture the numpy forward claims
(LlamaForCausalLM as the control, Qwen3ForCausalLM, MixtralForCausalLM,
Qwen2MoeForCausalLM, Qwen3MoeForCausalLM) in the hub's on-disk layout (one tensor per
expert projection, as the real checkpoints ship), loads each with
AutoModelForCausalLM.from_pretrained(dir, dtype=torch.float64), and compares the logits of
every prompt position with numpy_llama.Model.forward: max |diff| / (1 + |transformers|).
It fails above 1e-6, and when transformers reports a missing, unexpected or mismatched
weight (it would initialise those at random and the comparison would mean nothing). It
also runs the numpy forward broken on purpose (--no-renormalize, --no-qk-norm) and fails
unless those differ, so a comparison that could not see a bug does not pass.

How to run (needs network for pip the first time; about 6 GB under ~/.cache, since the
default Linux torch wheel pulls the CUDA libraries; 2 minutes to install here):

  python3 scripts/reference/check_numpy_reference.py \
      [--venv ~/.cache/tessera/hf-venv] [--out benchmarks/results/numpy_reference_vs_transformers.json]

It makes the virtualenv with the pinned versions below when it is missing and runs itself
again inside it. Not a ctest: it needs PyPI.
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
PINS = ["torch==2.15.0", "transformers==5.25.0", "safetensors==0.8.0", "numpy==2.4.6"]
# transformers in float64 throughout (float64_islands) against numpy's float64.
TOLERANCE = 1e-6
# transformers as it ships, whose norms, cos/sin and router softmax stay float32.
TOLERANCE_FLOAT32_ISLANDS = 1e-4
sys.path.insert(0, os.path.join(SOURCE, "tests", "reference"))  # numpy_llama, imported late.

DEFAULT_VENV = os.path.expanduser("~/.cache/tessera/hf-venv")
DEFAULT_OUT = os.path.join(SOURCE, "benchmarks", "results", "numpy_reference_vs_transformers.json")


def ensure_venv(venv):
    """Re-runs this script inside `venv` (created with PINS when missing) unless already there."""
    python = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    stamp = os.path.join(venv, "tessera-pins.txt")
    pinned = os.path.exists(stamp) and open(stamp).read().split() == PINS
    if not pinned:
        if not os.path.exists(python):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *PINS], check=True)
        with open(stamp, "w") as f:
            f.write("\n".join(PINS) + "\n")
    os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])


# --- tiny checkpoints --------------------------------------------------------------------

BASE = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 4,
    "vocab_size": 97,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}

# Each case: (name, config overrides). Windows are shorter than the prompt so they matter.
CASES = [
    ("llama", {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "attention_bias": True, "rope_theta": 10000.0}),
    # head_dim 24, not hidden / heads (16); biases before the q/k norm; windows on the
    # layers from max_window_layers.
    ("qwen3", {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 24,
               "attention_bias": True, "use_sliding_window": True, "sliding_window": 5,
               "max_window_layers": 2}),
    # No head_dim: Qwen3Config's default is 128, not hidden / heads.
    ("qwen3_default_head_dim", {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                "num_hidden_layers": 2}),
    ("mixtral", {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                 "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 5}),
    # Sparse layers 1 and 3 (step 2) less mlp_only_layers [3]: one sparse, three dense.
    ("qwen3_moe", {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                   "head_dim": 24, "num_experts": 8, "num_experts_per_tok": 3,
                   "moe_intermediate_size": 32, "norm_topk_prob": True,
                   "decoder_sparse_step": 2, "mlp_only_layers": [3]}),
    ("qwen3_moe_all_sparse", {"architectures": ["Qwen3MoeForCausalLM"],
                              "model_type": "qwen3_moe", "num_experts": 8,
                              "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                              "norm_topk_prob": True, "decoder_sparse_step": 1,
                              "mlp_only_layers": []}),
    ("qwen2_moe", {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
                   "num_experts": 8, "num_experts_per_tok": 4, "moe_intermediate_size": 16,
                   "shared_expert_intermediate_size": 48, "norm_topk_prob": False,
                   "decoder_sparse_step": 1, "mlp_only_layers": [2]}),
    # transformers' own window rules for the two Qwen MoEs (see numpy_llama.layer_windows):
    # Qwen3-MoE windows every layer, Qwen2-MoE the even layers below max_window_layers.
    ("qwen3_moe_window", {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                          "num_experts": 8, "num_experts_per_tok": 2,
                          "moe_intermediate_size": 32, "norm_topk_prob": False,
                          "use_sliding_window": True, "sliding_window": 5,
                          "max_window_layers": 2}),
    ("qwen2_moe_window", {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
                          "num_experts": 8, "num_experts_per_tok": 2,
                          "moe_intermediate_size": 16, "shared_expert_intermediate_size": 48,
                          "norm_topk_prob": True, "use_sliding_window": True,
                          "sliding_window": 5, "max_window_layers": 3}),
]


def tensor_shapes(c):
    """(name, shape, kind) of every weight in the hub layout; kind picks the scale."""
    import numpy_llama
    arch = c["architectures"][0]
    h, inter = c["hidden_size"], c["intermediate_size"]
    d = numpy_llama.head_dim_of(c)
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    qwen2 = arch in ("Qwen2MoeForCausalLM",)
    qkv_bias = qwen2 or c.get("attention_bias", False)
    o_bias = not qwen2 and c.get("attention_bias", False)
    out = [("model.embed_tokens.weight", (c["vocab_size"], h), "matrix")]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out.append((p + "input_layernorm.weight", (h,), "norm"))
        out += [(p + "self_attn.q_proj.weight", (q, h), "matrix"),
                (p + "self_attn.k_proj.weight", (kv, h), "matrix"),
                (p + "self_attn.v_proj.weight", (kv, h), "matrix"),
                (p + "self_attn.o_proj.weight", (h, q), "matrix")]
        if qkv_bias:
            out += [(p + "self_attn.q_proj.bias", (q,), "bias"),
                    (p + "self_attn.k_proj.bias", (kv,), "bias"),
                    (p + "self_attn.v_proj.bias", (kv,), "bias")]
        if o_bias:
            out.append((p + "self_attn.o_proj.bias", (h,), "bias"))
        if arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"):
            out += [(p + "self_attn.q_norm.weight", (d,), "norm"),
                    (p + "self_attn.k_norm.weight", (d,), "norm")]
        out.append((p + "post_attention_layernorm.weight", (h,), "norm"))

        def swiglu(prefix, names, size):
            gate, up, down = names
            return [(prefix + gate + ".weight", (size, h), "matrix"),
                    (prefix + up + ".weight", (size, h), "matrix"),
                    (prefix + down + ".weight", (h, size), "matrix")]

        if arch == "MixtralForCausalLM":
            b = p + "block_sparse_moe."
            out.append((b + "gate.weight", (c["num_local_experts"], h), "router"))
            for e in range(c["num_local_experts"]):
                out += swiglu(b + f"experts.{e}.", ("w1", "w3", "w2"), inter)
            continue
        step = c.get("decoder_sparse_step", 1)
        sparse = (arch in ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM") and
                  (l + 1) % step == 0 and l not in c.get("mlp_only_layers", []))
        names = ("gate_proj", "up_proj", "down_proj")
        if not sparse:
            out += swiglu(p + "mlp.", names, inter)
            continue
        out.append((p + "mlp.gate.weight", (c["num_experts"], h), "router"))
        for e in range(c["num_experts"]):
            out += swiglu(p + f"mlp.experts.{e}.", names, c["moe_intermediate_size"])
        if arch == "Qwen2MoeForCausalLM":
            out += swiglu(p + "mlp.shared_expert.", names, c["shared_expert_intermediate_size"])
            out.append((p + "mlp.shared_expert_gate.weight", (1, h), "matrix"))
    out.append(("model.norm.weight", (h,), "norm"))
    out.append(("lm_head.weight", (c["vocab_size"], h), "matrix"))
    return out


def write_safetensors(path, tensors):
    """A float32 .safetensors file by hand (the format is a JSON header and raw bytes)."""
    import numpy as np
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def write_checkpoint(folder, config, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape, kind in tensor_shapes(config):
        if kind == "norm":
            tensors[name] = 1.0 + 0.1 * rng.standard_normal(shape)
        elif kind == "bias":
            tensors[name] = 0.5 * rng.standard_normal(shape)
        else:
            # Router logits of standard deviation 4: near ties between the k-th and the
            # next expert are rare, so float32 and float64 routers pick the same experts.
            scale = (4.0 if kind == "router" else 1.0) / np.sqrt(shape[-1])
            tensors[name] = scale * rng.standard_normal(shape)
    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


# --- the comparison ------------------------------------------------------------------------

@contextlib.contextmanager
def float64_islands(model, inv_freq=None):
    """Runs `model` in float64 throughout. In a float64 model transformers still computes
    RMSNorm (`.to(torch.float32)`), RoPE's cos and sin, and the routers' softmax (`.float()`,
    `softmax(dtype=torch.float)`) in float32; here every float64 -> float32 cast returns the
    float64 tensor, and cos/sin are taken in float64 of the float32 angle (as numpy_llama
    does, and as transformers forms the angle). `inv_freq` (float32 numpy) replaces
    transformers' own, which it computes as a float32 power and so can differ from numpy's
    rounded float64 power by an ulp. What is left is the arithmetic order."""
    import torch
    orig_to, orig_float, orig_softmax = torch.Tensor.to, torch.Tensor.float, torch.nn.functional.softmax

    def narrows(t, dtype):
        return t.dtype == torch.float64 and dtype == torch.float32

    def to(self, *args, **kwargs):
        dtype = kwargs.get("dtype", next((a for a in args if isinstance(a, torch.dtype)), None))
        return self if narrows(self, dtype) else orig_to(self, *args, **kwargs)

    def float_(self, *args, **kwargs):
        return self if self.dtype == torch.float64 else orig_float(self, *args, **kwargs)

    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        return orig_softmax(input, dim=dim, _stacklevel=_stacklevel,
                            dtype=None if narrows(input, dtype) else dtype)

    def rotary(module):
        def forward(x, position_ids):
            freq = orig_to(module.inv_freq if inv_freq is None else torch.from_numpy(inv_freq),
                           device=x.device, dtype=torch.float32)
            freqs = orig_float(position_ids[..., None]) * freq  # The float32 angle.
            emb = torch.cat((freqs, freqs), dim=-1).double()
            return ((emb.cos() * module.attention_scaling).to(x.dtype),
                    (emb.sin() * module.attention_scaling).to(x.dtype))
        return forward

    rotaries = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]
    assert rotaries, "no rotary embedding module found to patch"
    for m in rotaries:
        m.forward = rotary(m)
    torch.Tensor.to, torch.Tensor.float, torch.nn.functional.softmax = to, float_, softmax
    try:
        yield
    finally:
        torch.Tensor.to, torch.Tensor.float, torch.nn.functional.softmax = (
            orig_to, orig_float, orig_softmax)
        for m in rotaries:
            del m.forward


def relative_max(ours, ref):
    import numpy as np
    return float(np.max(np.abs(ours - ref) / (1.0 + np.abs(ref))))


def safetensors_names(folder):
    names = set()
    for file in os.listdir(folder):
        if file.endswith(".safetensors"):
            with open(os.path.join(folder, file), "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                names |= set(json.loads(f.read(n))) - {"__metadata__"}
    return names


def check_case(name, folder, prompt, overrides):
    """Compares transformers and numpy_llama on the checkpoint in `folder`."""
    import numpy as np
    import numpy_llama
    import torch
    import transformers

    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float64, attn_implementation="sdpa", experts_implementation="eager",
        output_loading_info=True)
    model.eval()
    problems = {k: sorted(v) for k, v in info.items() if v}
    ids = torch.tensor([prompt])
    reference = numpy_llama.Model(folder)
    with torch.no_grad():
        shipped = model(ids).logits[0].numpy()
        with float64_islands(model):
            hf_own_inv_freq = model(ids).logits[0].numpy()
        with float64_islands(model, inv_freq=reference.inv_freq):
            hf = model(ids).logits[0].numpy()
    ours = reference.forward(prompt)
    hf_inv_freq = next(m for m in model.modules()
                       if type(m).__name__.endswith("RotaryEmbedding")).inv_freq
    result = {
        "architecture": config["architectures"][0],
        "config": overrides if overrides is not None else folder,
        "loaded_as": type(model).__name__,
        "hf_dtype": str(next(model.parameters()).dtype),
        "loading_problems": problems,
        "max_rel_diff": relative_max(ours, hf),
        "max_rel_diff_hf_inv_freq": relative_max(ours, hf_own_inv_freq),
        "max_rel_diff_float32_islands": relative_max(ours, shipped),
        "inv_freq_max_abs_diff": float(np.max(np.abs(
            hf_inv_freq.double().numpy() - reference.inv_freq.astype(np.float64)))),
        "max_abs_logit": float(np.max(np.abs(hf))),
        "greedy_ids_equal": bool((ours.argmax(-1) == hf.argmax(-1)).all()),
        "numpy_windows": reference.windows,
    }
    if reference.moe is not None:
        result["min_topk_router_logit_margin"] = reference.min_topk_margin
        # transformers 5 fuses the experts in memory; record how, and that save_pretrained
        # converts back to the hub's per-expert names that Tessera reads.
        result["in_memory_expert_tensors"] = {
            k: list(v.shape) for k, v in model.state_dict().items()
            if ".layers.1.mlp.experts" in k or ".layers.1.block_sparse_moe.experts" in k}
        with tempfile.TemporaryDirectory() as saved:
            model.save_pretrained(saved)
            result["save_pretrained_names_differ"] = sorted(
                safetensors_names(saved) ^ safetensors_names(folder))
    # The broken variants must disagree with transformers, or the check is blind to them.
    broken = {}
    if reference.moe is not None and reference.moe["renormalize"]:
        broken["no_renormalize"] = numpy_llama.Model(folder, renormalize=False)
    if reference.qk_norm:
        broken["no_qk_norm"] = numpy_llama.Model(folder, qk_norm=False)
    if name.endswith("_window") and overrides is not None:
        # Qwen2's rule (layers >= max_window_layers), which common/model_config.cc applies
        # to the Qwen MoEs too: transformers does otherwise, and this shows it matters.
        qwen2_rule = numpy_llama.Model(folder)
        first = config["max_window_layers"]
        qwen2_rule.windows = [config["sliding_window"] if l >= first else 0
                              for l in range(config["num_hidden_layers"])]
        broken["qwen2_window_rule"] = qwen2_rule
    result["broken_variants_max_rel_diff"] = {
        k: relative_max(m.forward(prompt), hf) for k, m in broken.items()}
    ok = (not problems and not result.get("save_pretrained_names_differ") and
          result["max_rel_diff"] <= TOLERANCE and
          result["max_rel_diff_hf_inv_freq"] <= TOLERANCE and
          result["max_rel_diff_float32_islands"] <= TOLERANCE_FLOAT32_ISLANDS and
          all(v > 1e3 * TOLERANCE for v in result["broken_variants_max_rel_diff"].values()))
    result["pass"] = ok
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--venv", default=DEFAULT_VENV)
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--checkpoint", action="append", default=[], metavar="DIR",
                        help="also compare on this Hugging Face folder, e.g. one that "
                        "`tessera gen-checkpoint --preset tiny-qwen3-moe --dtype f32` wrote "
                        "(repeatable)")
    args = parser.parse_args(argv)
    ensure_venv(args.venv)

    import numpy as np
    import torch
    import transformers

    torch.manual_seed(0)
    prompt = [1, 17, 42, 5, 88, 23, 61, 9, 33, 70, 14, 56, 2, 91, 38, 27]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(name, os.path.join(tmp, name), overrides) for name, overrides in CASES]
        cases += [("checkpoint:" + os.path.basename(os.path.normpath(d)), os.path.abspath(d),
                   None) for d in args.checkpoint]
        for name, folder, overrides in cases:
            try:
                if overrides is not None:
                    write_checkpoint(folder, dict(BASE, **overrides),
                                     seed=zlib.crc32(name.encode()))
                results[name] = check_case(name, folder, prompt, overrides)
            except Exception as e:  # A load failure is a finding to record, not a crash.
                results[name] = {"folder": folder, "config": overrides,
                                 "error": f"{type(e).__name__}: {e}", "pass": False}
            r = results[name]
            line = (f"{name:28s} max|diff|/(1+|ref|) = {r['max_rel_diff']:.3e} "
                    f"(own inv_freq {r['max_rel_diff_hf_inv_freq']:.3e}, "
                    f"as shipped {r['max_rel_diff_float32_islands']:.3e})"
                    if "max_rel_diff" in r else f"{name:28s} ERROR {r['error']}")
            if r.get("broken_variants_max_rel_diff"):
                line += "  broken: " + ", ".join(
                    f"{k} {v:.3e}" for k, v in r["broken_variants_max_rel_diff"].items())
            if r.get("loading_problems"):
                line += f"  loading problems: {r['loading_problems']}"
            print(line + ("" if r["pass"] else "  FAIL"), flush=True)

    commit = subprocess.run(["git", "-C", SOURCE, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    record = {
        "what": "tests/reference/numpy_llama.py against Hugging Face transformers: logits of "
                "every position of a 16-token prompt on tiny random checkpoints in the hub "
                "layout (per-expert tensors), both in float64; 'checkpoint:' cases are "
                "folders given with --checkpoint",
        "how": " ".join(["python3", os.path.relpath(os.path.abspath(__file__), SOURCE),
                         *sys.argv[1:]]),
        "metric": "max over positions and vocabulary of |numpy - transformers| / "
                  "(1 + |transformers|)",
        "tolerance": TOLERANCE,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__},
        "attn_implementation": "sdpa",
        # The default grouped_mm takes no float64; "eager" is the modeling file's expert loop.
        "experts_implementation": "eager",
        "prompt_ids": prompt,
        "base_config": BASE,
        "cases": results,
        "pass": all(r["pass"] for r in results.values()),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    print(f"wrote {args.out}: {'pass' if record['pass'] else 'FAIL'}")
    return 0 if record["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
