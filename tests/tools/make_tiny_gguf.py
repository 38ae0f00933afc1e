#!/usr/bin/env python3
"""Writes a tiny random llama-architecture GGUF file, for tests and as a fuzzer seed.

The default file (about 1 MB) is a 2-layer llama (hidden 256, ffn 512, 4 heads over 2 KV
heads of 64, RoPE base 10000, rms eps 1e-5, context 256) whose tensors between them use
every block type Tessera reads: F32 (norms), F16, BF16, Q8_0 (the embedding among others),
Q4_0, Q4_1, Q4_K and Q6_K, with an untied output.weight. Q8_0/Q4_0/Q4_1/BF16 come from
gguf-py's quantizer on random normal weights; gguf-py cannot quantize Q4_K or Q6_K, so
those blocks are built from random codes with small d/dmin. Which tensor gets which type
(TYPES below) is chosen so that `tessera run --model FILE.gguf` meets each of its paths:
fused q/k/v of int4 kinds (Q4_K + Q4_0 + Q4_1 served as int4 with the file's codes), an
int8 (Q8_0) down projection, int4 gate/up pairs, float fallbacks for mixed kinds, and one
Q4_K group with a zero scale and a non-zero min (blk.1.ffn_up), which Tessera's int4 form
cannot hold, so that pair is dequantized.

The tokenizer is GPT-2 byte-level BPE (tokenizer.ggml.model "gpt2", pre "gpt-2"): the 256
characters of GPT-2's byte alphabet (token id = byte value), a few merges ("Ġ t", "h e",
"Ġt he", ...), and the control tokens <|im_start|> and <|im_end|> (eos), no BOS added,
and a ChatML chat template.

--small writes a 16 KB variant (16352 bytes) (hidden 32, one layer, tied embedding, 32-element block
types only, since K-quants need rows of 256) for fuzz/corpus/gguf_fuzzer/.

Usage: make_tiny_gguf.py OUT.gguf [--seed N] [--small]
   or: from make_tiny_gguf import write_tiny_gguf
Needs numpy and gguf==0.19.0 (requirements-dev.txt). Deterministic for a given seed.
"""

import argparse
import sys

import numpy as np

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Merges in rank order; each result is appended to the vocabulary after the 256 bytes.
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s", "a n", "Ġ w"]
SPECIAL_TOKENS = ["<|im_start|>", "<|im_end|>"]

# GGUF type of each tensor (layer tensors under their name after "blk.N."), per variant.
# Norms are F32. Keys of the per-layer dicts: layer index.
FULL = {
    "hidden": 256, "ffn": 512, "layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 64,
    "context": 256, "tied": False,
    "global": {"token_embd.weight": "Q8_0", "output.weight": "Q6_K"},
    "layer": [
        {"attn_q.weight": "Q4_K", "attn_k.weight": "Q4_0", "attn_v.weight": "Q4_1",
         "attn_output.weight": "F16", "ffn_gate.weight": "BF16", "ffn_up.weight": "Q8_0",
         "ffn_down.weight": "Q6_K"},
        {"attn_q.weight": "F16", "attn_k.weight": "Q4_K", "attn_v.weight": "Q6_K",
         "attn_output.weight": "Q4_0", "ffn_gate.weight": "Q4_1", "ffn_up.weight": "Q4_K",
         "ffn_down.weight": "Q8_0"},
    ],
    # (tensor, row, group): a Q4_K sub-block given scale 0 and a non-zero min.
    "zero_scale_groups": [("blk.1.ffn_up.weight", 5, 3)],
}
SMALL = {
    "hidden": 32, "ffn": 32, "layers": 1, "heads": 2, "kv_heads": 1, "head_dim": 16,
    "context": 64, "tied": True,
    "global": {"token_embd.weight": "Q4_0"},
    "layer": [
        {"attn_q.weight": "Q8_0", "attn_k.weight": "F16", "attn_v.weight": "BF16",
         "attn_output.weight": "Q4_1", "ffn_gate.weight": "Q4_0", "ffn_up.weight": "Q4_1",
         "ffn_down.weight": "Q4_0"},
    ],
    "zero_scale_groups": [],
}

WEIGHT_STD = 0.06  # Random normal weights before quantization.
EMBED_STD = 0.5


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (index = byte value)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def vocabulary():
    """(tokens, token types, merges): bytes, merge results, then the control tokens."""
    tokens = bytes_to_unicode()
    for merge in MERGES:
        left, right = merge.split(" ")
        assert left in tokens and right in tokens, merge
        tokens.append(left + right)
    types = [1] * len(tokens) + [3] * len(SPECIAL_TOKENS)
    tokens += SPECIAL_TOKENS
    return tokens, types, list(MERGES)


def _f16_bytes(values):
    return np.asarray(values, dtype=np.float16).view(np.uint8).reshape(-1, 2)


def q4_k_blocks(rng, rows, cols, zero_groups=()):
    """Random Q4_K rows: uint8 [rows, cols / 256 * 144]. Scales 1..63 (none zero unless
    (row, group) is in zero_groups, then scale 0 and min > 0), mins 0..63, codes 0..15."""
    nb = cols // 256
    blocks = np.zeros((rows, nb, 144), dtype=np.uint8)
    d = rng.uniform(1.5e-4, 3e-4, size=(rows, nb))
    dmin = rng.uniform(1e-3, 2.5e-3, size=(rows, nb))
    sc = rng.integers(1, 64, size=(rows, nb, 8))
    m = rng.integers(0, 64, size=(rows, nb, 8))
    for row, group in zero_groups:
        sc[row, group // 8, group % 8] = 0
        m[row, group // 8, group % 8] = 37
    blocks[:, :, 0:2] = _f16_bytes(d).reshape(rows, nb, 2)
    blocks[:, :, 2:4] = _f16_bytes(dmin).reshape(rows, nb, 2)
    packed = np.zeros((rows, nb, 12), dtype=np.int64)
    for j in range(4):
        # llama.cpp's get_scale_min_k4, inverted.
        packed[..., j] = sc[..., j] | ((sc[..., j + 4] >> 4) << 6)
        packed[..., j + 4] = m[..., j] | ((m[..., j + 4] >> 4) << 6)
        packed[..., j + 8] = (sc[..., j + 4] & 0xF) | ((m[..., j + 4] & 0xF) << 4)
    blocks[:, :, 4:16] = packed.astype(np.uint8)
    blocks[:, :, 16:] = rng.integers(0, 256, size=(rows, nb, 128), dtype=np.uint8)
    return blocks.reshape(rows, nb * 144)


def q6_k_blocks(rng, rows, cols):
    """Random Q6_K rows: uint8 [rows, cols / 256 * 210]; random ql/qh/int8 scales, and a
    small d, a few of them f16 subnormals (below 6.1e-5)."""
    nb = cols // 256
    blocks = rng.integers(0, 256, size=(rows, nb, 210), dtype=np.uint8)
    d = rng.uniform(3e-5, 8e-5, size=(rows, nb))
    blocks[:, :, 208:210] = _f16_bytes(d).reshape(rows, nb, 2)
    return blocks.reshape(rows, nb * 210)


def tensor_data(rng, qtype_name, shape, std, zero_groups=()):
    """(array, raw_dtype or None) for GGUFWriter.add_tensor: `shape` is row-major [rows, cols]."""
    from gguf import GGMLQuantizationType as T
    from gguf import quants

    rows, cols = shape
    if qtype_name == "Q4_K":
        return q4_k_blocks(rng, rows, cols, zero_groups), T.Q4_K
    if qtype_name == "Q6_K":
        return q6_k_blocks(rng, rows, cols), T.Q6_K
    if qtype_name == "Q5_K":  # Not read by Tessera: random bytes, for refusal tests.
        return rng.integers(0, 256, size=(rows, cols // 256 * 176), dtype=np.uint8), T.Q5_K
    w = (rng.standard_normal(shape) * std).astype(np.float32)
    if qtype_name == "F32":
        return w, None
    if qtype_name == "F16":
        return w.astype(np.float16), None
    qtype = T[qtype_name]
    return quants.quantize(w, qtype), qtype


def write_tiny_gguf(path, seed=0, small=False, type_overrides=None):
    """Writes the file; returns {tensor name: GGUF type name}. type_overrides maps tensor
    names to other type names (e.g. {"blk.0.ffn_up.weight": "Q5_K"} for a refusal test)."""
    import gguf

    spec = SMALL if small else FULL
    rng = np.random.default_rng(seed)
    tokens, token_types, merges = vocabulary()
    vocab = len(tokens)
    hidden, ffn = spec["hidden"], spec["ffn"]
    heads, kv_heads, head_dim = spec["heads"], spec["kv_heads"], spec["head_dim"]

    w = gguf.GGUFWriter(path, "llama")
    if not small:  # The small file stays under 16 KiB.
        w.add_name("tessera-tiny-llama")
    w.add_context_length(spec["context"])
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_block_count(spec["layers"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(token_types)
    w.add_token_merges(merges)
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    # (name, type, [rows, cols], std)
    plan = [("token_embd.weight", spec["global"]["token_embd.weight"], [vocab, hidden], EMBED_STD)]
    shapes = {
        "attn_q.weight": [heads * head_dim, hidden],
        "attn_k.weight": [kv_heads * head_dim, hidden],
        "attn_v.weight": [kv_heads * head_dim, hidden],
        "attn_output.weight": [hidden, heads * head_dim],
        "ffn_gate.weight": [ffn, hidden],
        "ffn_up.weight": [ffn, hidden],
        "ffn_down.weight": [hidden, ffn],
    }
    for layer, types in enumerate(spec["layer"]):
        p = f"blk.{layer}."
        plan.append((p + "attn_norm.weight", "F32", [hidden], None))
        for name in shapes:
            plan.append((p + name, types[name], shapes[name], WEIGHT_STD))
        plan.append((p + "ffn_norm.weight", "F32", [hidden], None))
    plan.append(("output_norm.weight", "F32", [hidden], None))
    if not spec["tied"]:
        plan.append(("output.weight", spec["global"]["output.weight"], [vocab, hidden], WEIGHT_STD * 1.5))

    overrides = dict(type_overrides or {})
    written = {}
    for name, qtype, shape, std in plan:
        qtype = overrides.pop(name, qtype)
        if std is None:  # An RMSNorm weight: F32 near 1.
            array = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
            if qtype != "F32":
                raise ValueError(f"{name}: norms are written as F32 only")
            w.add_tensor(name, array)
        else:
            zero = [(r, g) for t, r, g in spec["zero_scale_groups"] if t == name]
            array, raw = tensor_data(rng, qtype, shape, std, zero)
            w.add_tensor(name, array, raw_dtype=raw)
        written[name] = qtype
    if overrides:
        raise ValueError(f"type_overrides name tensors the file does not have: {sorted(overrides)}")

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", help="GGUF file to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", action="store_true",
                        help="the 16 KB fuzzer-seed variant (hidden 32, 1 layer, tied, no K-quants)")
    args = parser.parse_args(argv)
    types = write_tiny_gguf(args.out, seed=args.seed, small=args.small)
    counts = {}
    for t in types.values():
        counts[t] = counts.get(t, 0) + 1
    print(f"{args.out}: {len(types)} tensors, " +
          ", ".join(f"{n} {t}" for t, n in sorted(counts.items())), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
