#!/usr/bin/env python3
"""Converts a llama-architecture GGUF file into a float32 Hugging Face folder.

The numpy forward (numpy_llama.py) is Tessera's oracle, and it reads Hugging Face folders.
To check Tessera on a GGUF file, this turns the file into what numpy_llama reads:
model.safetensors in F32 and a LlamaForCausalLM config.json. It shares nothing with
Tessera's C++ GGUF reader: the file is parsed and every quantized tensor (Q4_0, Q4_1,
Q8_0, K-quants...) is dequantized by llama.cpp's own gguf-py (`gguf.GGUFReader`,
`gguf.quants.dequantize`), and only the name mapping and llama.cpp's q/k row permutation
are undone here. scripts/reference/check_gguf_reference.py checks the result against
Hugging Face transformers' GGUF loader and its own torch dequantizer.

What it undoes:
- GGUF lists shapes innermost first (ne0 = columns); gguf-py already hands the data over
  as row-major [ne1, ne0], which is the Hugging Face [out, in] layout.
- convert_hf_to_gguf.py permutes the rows of q_proj (n_head heads) and k_proj
  (n_head_kv heads), weights and biases, from rotate-half order to llama.cpp's interleaved
  RoPE pairs: w.reshape(n, 2, head_dim / 2, ...).swapaxes(1, 2). The inverse is
  w.reshape(n, head_dim / 2, 2, ...).swapaxes(1, 2).
- No output.weight means the embedding is tied as the output (tie_word_embeddings).

Only the llama architecture without RoPE scaling tables is handled (llama.cpp also writes
Mistral and TinyLlama as llama); anything else raises rather than guess.

Usage: gguf_to_hf.py FILE.gguf OUT_DIR        (or: from gguf_to_hf import convert)
Needs numpy and gguf==0.19.0 (requirements-dev.txt). SmolLM2-135M (98 MB Q4_1) takes
about 5 s and writes 540 MB.
"""

import argparse
import json
import os
import re
import struct
import sys

import numpy as np

# GGUF tensor name -> Hugging Face name. {} is the layer index.
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_output.bias": "self_attn.o_proj.bias",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_LAYER = re.compile(r"^blk\.(\d+)\.(.+)$")


def hf_name(gguf_name):
    """The Hugging Face name of a GGUF tensor; KeyError for one this converter does not know."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _LAYER.match(gguf_name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"
    raise KeyError(f"GGUF tensor {gguf_name!r} has no Hugging Face name here")


def unpermute_rows(w, n_heads):
    """Inverse of convert_hf_to_gguf's LlamaModel.permute on the rows of w ([out] or [out, in])."""
    head_dim = w.shape[0] // n_heads
    return (w.reshape(n_heads, head_dim // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def field_value(reader, key, default=None):
    """A metadata value as Python (str, int, float, bool, list), or `default` when absent."""
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def read_config(reader, tensor_names):
    """The LlamaForCausalLM config.json a GGUF file's metadata describes."""
    arch = field_value(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"general.architecture is {arch!r}; only 'llama' is converted")

    def key(name, default=None):
        value = field_value(reader, f"{arch}.{name}", default)
        if value is None:
            raise ValueError(f"GGUF metadata {arch}.{name} is missing")
        return value

    hidden = key("embedding_length")
    heads = key("attention.head_count")
    kv_heads = key("attention.head_count_kv", heads)
    head_dim = key("attention.key_length", hidden // heads)
    if key("attention.value_length", head_dim) != head_dim:
        raise ValueError("key_length != value_length is not a llama model")
    if key("rope.dimension_count", head_dim) != head_dim:
        raise ValueError("rope.dimension_count != head_dim (partial rotary) is not modelled")
    if "rope_freqs.weight" in tensor_names:
        raise ValueError("rope_freqs.weight (Llama 3.1-style RoPE factors) is not converted")
    scaling_type = field_value(reader, f"{arch}.rope.scaling.type", "none")
    rope_scaling = None
    if scaling_type == "linear":
        rope_scaling = {"rope_type": "linear", "factor": float(key("rope.scaling.factor"))}
    elif scaling_type != "none":
        raise ValueError(f"rope.scaling.type {scaling_type!r} is not converted")
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    embed = next(t for t in reader.tensors if t.name == "token_embd.weight")
    vocab = int(embed.shape[1])  # ne1 of token_embd: rows of the embedding.
    if key("vocab_size", vocab) != vocab:
        raise ValueError(f"{arch}.vocab_size disagrees with token_embd's {vocab} rows")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": int(hidden),
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": int(key("block_count")),
        "num_attention_heads": int(heads),
        "num_key_value_heads": int(kv_heads),
        "head_dim": int(head_dim),
        # GGUF stores a float32 (1e-5 reads back as 9.99999975e-06); transformers' loader
        # keeps that value too.
        "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(key("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(key("context_length")),
        "vocab_size": vocab,
        "hidden_act": "silu",
        "attention_bias": "blk.0.attn_q.bias" in tensor_names,
        "mlp_bias": False,
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "torch_dtype": "float32",
    }
    if rope_scaling:
        config["rope_scaling"] = rope_scaling
    for name in ("bos", "eos", "padding"):
        token_id = field_value(reader, f"tokenizer.ggml.{name}_token_id")
        if token_id is not None:
            config["pad_token_id" if name == "padding" else f"{name}_token_id"] = int(token_id)
    if tokens is not None and len(tokens) != vocab:
        config["tokenizer_vocab_size"] = len(tokens)  # Recorded, not used: a hint for readers.
    return config


def dequantized(tensor):
    """A GGUF tensor as a float32 array in Hugging Face (row-major [ne1, ne0]) layout."""
    from gguf.quants import dequantize

    shape = tuple(int(n) for n in reversed(tensor.shape))
    array = dequantize(tensor.data, tensor.tensor_type)
    return np.ascontiguousarray(array, dtype=np.float32).reshape(shape)


def hf_tensors(reader, config):
    """Yields (Hugging Face name, float32 array) for every tensor of the file, un-permuted."""
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        array = dequantized(tensor)
        if name.endswith(("q_proj.weight", "q_proj.bias")):
            array = unpermute_rows(array, heads)
        elif name.endswith(("k_proj.weight", "k_proj.bias")):
            array = unpermute_rows(array, kv_heads)
        yield name, np.ascontiguousarray(array)


def convert(gguf_path, out_dir):
    """Writes out_dir/{config.json, model.safetensors} from gguf_path; returns the config.

    Tensors are written one at a time, so memory stays near the largest tensor.
    """
    import gguf

    reader = gguf.GGUFReader(gguf_path)
    names = {t.name for t in reader.tensors}
    config = read_config(reader, names)
    # The header needs every shape and offset before any data: shapes come from metadata.
    header, offset, order = {}, 0, []
    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        shape = [int(n) for n in reversed(tensor.shape)]
        size = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        order.append(name)
        offset += size
    header["__metadata__"] = {"format": "pt", "source": os.path.basename(gguf_path)}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for expected, (name, array) in zip(order, hf_tensors(reader, config)):
            assert name == expected and list(array.shape) == header[name]["shape"], name
            f.write(array.astype("<f4", copy=False).tobytes())
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return config


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gguf", help="a llama-architecture .gguf file")
    parser.add_argument("out_dir", help="folder to write config.json and model.safetensors to")
    args = parser.parse_args(argv)
    config = convert(args.gguf, args.out_dir)
    print(f"wrote {args.out_dir}: {config['num_hidden_layers']} layers, hidden "
          f"{config['hidden_size']}, vocab {config['vocab_size']}, tied "
          f"{config['tie_word_embeddings']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
