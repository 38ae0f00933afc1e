#!/usr/bin/env python3
"""Writes FP8 (E4M3) copies of a float safetensors checkpoint, for Tessera's tests.

Numpy only (no torch, no ml_dtypes): E4M3 rounding is done here, independently of
Tessera's C++ reader, so the two check each other. Three on-disk formats:

  fp8                 vLLM / AutoFP8 legacy: weight F8_E4M3 [out, in], weight_scale
                      float32 [] (one per tensor), input_scale float32 [] (a static
                      activation scale Tessera ignores); quantization_config
                      {"quant_method": "fp8", "activation_scheme": "static"}.
  fbgemm_fp8          Meta's Llama 3.1 405B FP8: weight_scale float32 [out, 1] (one per
                      output channel); modules_to_not_convert stay float (here layer 0's
                      attention projections and every linear of the last layer, as Meta
                      keeps attention and the first/last layers in BF16).
  compressed-tensors  llm-compressor: config group weights {num_bits 8, type float,
                      strategy tensor|channel}; weight_scale [1] or [out, 1];
                      ignore ["lm_head"].

Every linear layer (q/k/v/o, gate/up/down) not left out is quantized with
scale = absmax / 448 (per tensor or per row) and q = e4m3(w / scale), round to nearest
even; other tensors are copied as they are. --dequant-out also writes the float32
checkpoint the FP8 one stands for (w = float32(e4m3 value) * float32(scale)), so a
forward pass over each can be compared exactly.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from int4_checkpoint import BF16Array, read_safetensors, write_safetensors  # noqa: E402

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
E4M3_MAX = 448.0


def e4m3_table():
    """The float64 value of every E4M3 byte (OCP "fn": 0x7f / 0xff are NaN)."""
    b = np.arange(256, dtype=np.int64)
    exp, mant = (b >> 3) & 0xF, b & 0x7
    v = np.where(exp == 0, mant / 512.0, (1.0 + mant / 8.0) * np.exp2(exp - 7.0))
    v = np.where(b & 0x80, -v, v)
    v[(exp == 15) & (mant == 7)] = np.nan
    return v


TABLE = e4m3_table()
POSITIVE = TABLE[:0x7F]  # Bytes 0x00..0x7e: increasing, finite.


def to_e4m3(x):
    """Bytes of x (already scaled) rounded to nearest even E4M3, saturating at 448."""
    a = np.minimum(np.abs(x.astype(np.float64)), E4M3_MAX)
    _, e = np.frexp(a)                # a = m * 2^e, m in [0.5, 1)
    e = np.maximum(e - 1, -6)         # Below 2^-6 the subnormals keep steps of 2^-9.
    step = np.ldexp(1.0, e - 3)       # 3 mantissa bits.
    q = np.minimum(np.rint(a / step) * step, E4M3_MAX)  # np.rint: half to even.
    idx = np.searchsorted(POSITIVE, q)
    assert np.array_equal(POSITIVE[idx], q), "rounding produced a non-E4M3 value"
    return (idx | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def quantize(w, per_channel):
    """w [out, in] float32 -> (bytes [out, in], scale float32 [out, 1] or scalar)."""
    amax = np.abs(w).max(axis=1, keepdims=True) if per_channel else np.abs(w).max()
    scale = (np.asarray(amax, np.float32) / np.float32(E4M3_MAX)).astype(np.float32)
    scale = np.where(scale == 0, np.float32(1), scale).astype(np.float32)
    return to_e4m3(w / scale), scale


class F8Array:
    """E4M3 bytes, written with dtype F8_E4M3."""

    DTYPE = "F8_E4M3"

    def __init__(self, bits):
        self.bits = bits
        self.shape = bits.shape


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--src", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dequant-out")
    p.add_argument("--format", choices=["fp8", "fbgemm_fp8", "compressed-tensors"], required=True)
    p.add_argument("--strategy", choices=["tensor", "channel"],
                   help="compressed-tensors only (default channel); fp8 is per tensor, "
                        "fbgemm_fp8 per channel")
    args = p.parse_args()
    if args.strategy and args.format != "compressed-tensors":
        p.error("--strategy applies to compressed-tensors only")
    strategy = {"fp8": "tensor", "fbgemm_fp8": "channel"}.get(args.format, args.strategy or "channel")
    per_channel = strategy == "channel"

    with open(os.path.join(args.src, "config.json")) as f:
        config = json.load(f)
    last = config["num_hidden_layers"] - 1
    not_convert = []
    if args.format == "fbgemm_fp8":
        not_convert = [f"model.layers.0.self_attn.{m}" for m in ATTENTION]
        not_convert += [f"model.layers.{last}.{'self_attn' if m in ATTENTION else 'mlp'}.{m}"
                        for m in LINEARS]
        not_convert.append("lm_head")

    tensors = read_safetensors(os.path.join(args.src, "model.safetensors"))
    quant, dequant = {}, {}
    for name, w in tensors.items():
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        if (module is None or module.split(".")[-1] not in LINEARS or len(w.shape) != 2
                or module in not_convert):
            quant[name] = w if isinstance(w, BF16Array) else w.astype(np.float32)
            dequant[name] = quant[name]
            continue
        w = w.astype(np.float32)
        q, scale = quantize(w, per_channel)
        dequant[name] = (TABLE[q].astype(np.float32) * scale).astype(np.float32)
        quant[name] = F8Array(q)
        if args.format == "fp8":
            quant[module + ".weight_scale"] = np.asarray(scale, np.float32).reshape(())
            quant[module + ".input_scale"] = np.asarray(1.0, np.float32).reshape(())
        elif per_channel:
            quant[module + ".weight_scale"] = scale.reshape(w.shape[0], 1)
        else:
            quant[module + ".weight_scale"] = np.asarray(scale, np.float32).reshape(1)

    if args.format == "fp8":
        qc = {"quant_method": "fp8", "activation_scheme": "static"}
    elif args.format == "fbgemm_fp8":
        qc = {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
              "modules_to_not_convert": not_convert}
    else:
        qc = {"quant_method": "compressed-tensors", "format": "float-quantized",
              "quantization_status": "compressed", "ignore": ["lm_head"],
              "config_groups": {"group_0": {
                  "targets": ["Linear"],
                  "weights": {"num_bits": 8, "type": "float", "strategy": strategy,
                              "symmetric": True, "dynamic": False},
                  "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                        "symmetric": True, "dynamic": True}}}}
    targets = [(args.out, quant, dict(config, quantization_config=qc))]
    if args.dequant_out:
        targets.append((args.dequant_out, dequant, config))
    for out_dir, ts, cfg in targets:
        os.makedirs(out_dir, exist_ok=True)
        for entry in os.listdir(args.src):
            if entry.endswith(".json") and entry != "config.json":
                shutil.copy(os.path.join(args.src, entry), os.path.join(out_dir, entry))
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        write_safetensors(os.path.join(out_dir, "model.safetensors"), ts)


if __name__ == "__main__":
    main()
