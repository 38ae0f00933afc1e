#!/usr/bin/env python3
"""Writes GPTQ or AWQ 4-bit copies of a float safetensors checkpoint, for Tessera's tests.

Round-to-nearest, group-wise, asymmetric 4-bit quantization of every linear layer whose
shape the formats can pack (both dims divisible by 8, in_features by the group size);
other tensors are copied as they are. Packing follows the public formats, written here
independently of Tessera's C++ reader so the two check each other:

  GPTQ  qweight int32 [in/8, out]: input row 8*i+k in bits 4k..4k+3 of word [i, o].
        qzeros  int32 [groups, out/8]: output column 8*j+k in bits 4k of word [g, j];
        the "gptq" (v1) format stores zero-1, "gptq_v2" the zero itself.
        scales  float16 [groups, out]; g_idx int32 [in] = i // group_size.
  AWQ   qweight int32 [in, out/8] and qzeros int32 [groups, out/8], packed along the
        output dim with nibble k of word j holding column 8*j + ORDER[k],
        ORDER = [0, 2, 4, 6, 1, 3, 5, 7]; scales float16 [groups, out].

--dequant-out also writes the float32 checkpoint the 4-bit one stands for
(w = float32(scale) * (q - zero)), so a forward pass over each can be compared exactly.
"""
import argparse
import json
import os
import shutil
import struct

import numpy as np

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32}


class BF16Array:
    """BF16 bits kept as they are, so tensors left unquantized are copied bit for bit."""

    DTYPE = "BF16"

    def __init__(self, bits):
        self.bits = bits
        self.shape = bits.shape
        self.ndim = bits.ndim

    def astype(self, dtype):
        return (self.bits.astype(np.uint32) << 16).view(np.float32).astype(dtype)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[b:end]
        if e["dtype"] == "BF16":
            arr = BF16Array(np.frombuffer(raw, np.uint16).reshape(e["shape"]))
            out[name] = arr
            continue
        else:
            arr = np.frombuffer(raw, DTYPES[e["dtype"]])
        out[name] = arr.reshape(e["shape"]).copy()
    return out


def write_safetensors(path, tensors):
    names = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int32): "I32"}
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        if hasattr(arr, "bits"):  # Raw bits of a dtype numpy lacks (BF16Array, F8Array).
            blob, dtype = np.ascontiguousarray(arr.bits).tobytes(), arr.DTYPE
        else:
            blob, dtype = np.ascontiguousarray(arr).tobytes(), names[arr.dtype]
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def quantize(w, group):
    """w [out, in] -> codes [in, out], zeros [groups, out], scales (float16) [groups, out]."""
    out_f, in_f = w.shape
    g = w.T.reshape(in_f // group, group, out_f).astype(np.float64)
    lo = np.minimum(g.min(axis=1), 0.0)
    hi = np.maximum(g.max(axis=1), 0.0)
    scale = np.maximum((hi - lo) / 15.0, 1e-8).astype(np.float16)
    s = scale.astype(np.float64)
    # Zeros 1..15: the v1 format cannot store a zero of 0 (it stores zero - 1).
    zero = np.clip(np.rint(-lo / s), 1, 15)
    q = np.clip(np.rint(g / s[:, None, :]) + zero[:, None, :], 0, 15)
    return (q.reshape(in_f, out_f).astype(np.uint32), zero.astype(np.uint32), scale)


def pack_rows(codes):
    """Packs 8 consecutive rows of codes [n, m] into words [n/8, m] (GPTQ qweight)."""
    n, m = codes.shape
    words = np.zeros((n // 8, m), np.uint32)
    for k in range(8):
        words |= codes[k::8, :] << np.uint32(4 * k)
    return words.view(np.int32)


def pack_cols(codes, order):
    """Packs 8 columns of codes [n, m] into words [n, m/8]; nibble k holds column order[k]."""
    n, m = codes.shape
    words = np.zeros((n, m // 8), np.uint32)
    for k in range(8):
        words |= codes[:, order[k]::8] << np.uint32(4 * k)
    return words.view(np.int32)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--src", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dequant-out")
    p.add_argument("--method", choices=["gptq", "awq"], required=True)
    p.add_argument("--group-size", type=int, required=True)
    p.add_argument("--checkpoint-format", default="gptq", choices=["gptq", "gptq_v2"])
    args = p.parse_args()

    tensors = read_safetensors(os.path.join(args.src, "model.safetensors"))
    quant, dequant = {}, {}
    for name, w in tensors.items():
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        if (module is None or module.split(".")[-1] not in LINEARS or w.ndim != 2
                or w.shape[0] % 8 or w.shape[1] % 8 or w.shape[1] % args.group_size):
            quant[name] = w if isinstance(w, BF16Array) else w.astype(np.float32)
            dequant[name] = quant[name]
            continue
        w = w.astype(np.float32)
        codes, zero, scale = quantize(w, args.group_size)
        in_f = w.shape[1]
        rows_g = np.arange(in_f) // args.group_size
        deq = scale.astype(np.float32)[rows_g] * (codes.astype(np.float32) -
                                                  zero.astype(np.float32)[rows_g])
        dequant[name] = np.ascontiguousarray(deq.T)
        if args.method == "gptq":
            stored = zero - 1 if args.checkpoint_format == "gptq" else zero
            quant[module + ".qweight"] = pack_rows(codes)
            quant[module + ".qzeros"] = pack_cols(stored, list(range(8)))
            quant[module + ".scales"] = scale
            quant[module + ".g_idx"] = rows_g.astype(np.int32)
        else:
            quant[module + ".qweight"] = pack_cols(codes, AWQ_ORDER)
            quant[module + ".qzeros"] = pack_cols(zero, AWQ_ORDER)
            quant[module + ".scales"] = scale

    with open(os.path.join(args.src, "config.json")) as f:
        config = json.load(f)
    if args.method == "gptq":
        qc = {"quant_method": "gptq", "bits": 4, "group_size": args.group_size,
              "desc_act": False, "sym": False, "checkpoint_format": args.checkpoint_format}
    else:
        qc = {"quant_method": "awq", "bits": 4, "group_size": args.group_size,
              "version": "gemm", "zero_point": True}
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
