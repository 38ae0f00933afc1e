#!/usr/bin/env python3
"""Writes a GGUF for llama.cpp from a Hugging Face safetensors folder, with PyPI's `gguf`.

    benchmarks/peer/hf_to_gguf.py MODEL_DIR OUT.gguf

The side-by-side needs both engines to read the same weights: this script streams the
safetensors bytes into the GGUF unchanged (BF16 stays BF16, F16 stays F16, F32 stays F32;
nothing is requantized). It mirrors llama.cpp's convert_hf_to_gguf.py (its Qwen2Model,
Qwen3Model, Qwen2MoeModel, Qwen3MoeModel and LlamaModel classes, which Mixtral uses) with
two differences of means, none of result: it needs neither torch nor transformers, and it
never holds a whole model in memory (experts are stacked while they are written).

What it mirrors:
- architectures: Qwen3MoeForCausalLM -> qwen3moe, Qwen3ForCausalLM -> qwen3,
  Qwen2MoeForCausalLM -> qwen2moe, Qwen2ForCausalLM -> qwen2, MixtralForCausalLM,
  MistralForCausalLM and LlamaForCausalLM -> llama.
- tensor names from gguf's own name map (gguf.get_tensor_name_map), e.g. token_embd,
  output_norm, output, blk.N.attn_norm, attn_q/k/v, attn_output, attn_q_norm, attn_k_norm,
  ffn_norm, ffn_gate_inp, ffn_{gate,up,down}_exps stacked [n_expert, ...] (GGML ne
  {n_embd, n_ff_exp, n_expert} for gate/up, {n_ff_exp, n_embd, n_expert} for down), the
  Qwen2-MoE shared expert (ffn_*_shexp, ffn_gate_inp_shexp).
- dtypes: 1-D tensors, norms and the routers (ffn_gate_inp, ffn_gate_inp_shexp) as F32
  (exact: BF16 and F16 widen losslessly), everything else in the checkpoint's own dtype;
  general.file_type MOSTLY_BF16 / MOSTLY_F16 / ALL_F32 accordingly.
- q/k: Qwen weights are written as they are (llama.cpp runs Qwen with NEOX RoPE); for the
  llama architecture (Mixtral, Mistral, Llama) q_proj and k_proj rows are permuted as
  LlamaModel.permute does (llama.cpp runs llama with interleaved RoPE).
- metadata: block_count, context_length, embedding_length, feed_forward_length,
  attention.head_count(_kv), attention.key_length/value_length (from head_dim),
  rope.freq_base, rope scaling (linear, yarn), attention.layer_norm_rms_epsilon,
  expert_count, expert_used_count, expert_feed_forward_length,
  expert_shared_feed_forward_length; llama: vocab_size and rope.dimension_count.
- tokenizer: a byte-level BPE tokenizer.json (Qwen, Llama 3) as tokenizer.ggml.model
  "gpt2" with tokens, token types (added tokens CONTROL when special or <|...|>-shaped,
  USER_DEFINED otherwise, ids past the vocabulary "[PADn]" UNUSED), merges and pre-tokenizer
  ("qwen2" for Qwen2's split regex, "llama-bpe" for Llama 3's; --tokenizer-pre overrides);
  a SentencePiece-style tokenizer.json (byte_fallback BPE, "<0xNN>" tokens) as "llama" with
  scores -1000 and BYTE/CONTROL/NORMAL types, as gguf's LlamaHfVocab does; bos/eos/pad/unk
  ids and add_bos/add_eos from gguf.SpecialVocab, as convert_hf_to_gguf.py does.

What llama.cpp cannot represent is refused rather than approximated: a Qwen-MoE with
dense layers among the MoE ones (mlp_only_layers, decoder_sparse_step > 1), a Qwen3-MoE
without top-k renormalisation, a Qwen2-MoE with it, attention windows.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import struct
import sys
from pathlib import Path

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover
    sys.exit("hf_to_gguf: needs PyPI's gguf (pip install -r requirements-dev.txt)")

ARCHES = {
    "Qwen3MoeForCausalLM": gguf.MODEL_ARCH.QWEN3MOE,
    "Qwen3ForCausalLM": gguf.MODEL_ARCH.QWEN3,
    "Qwen2MoeForCausalLM": gguf.MODEL_ARCH.QWEN2MOE,
    "Qwen2ForCausalLM": gguf.MODEL_ARCH.QWEN2,
    "MixtralForCausalLM": gguf.MODEL_ARCH.LLAMA,
    "MistralForCausalLM": gguf.MODEL_ARCH.LLAMA,
    "LlamaForCausalLM": gguf.MODEL_ARCH.LLAMA,
}
DTYPES = {  # safetensors dtype -> (numpy storage dtype, ggml type, itemsize)
    "BF16": (np.uint16, gguf.GGMLQuantizationType.BF16),
    "F16": (np.float16, gguf.GGMLQuantizationType.F16),
    "F32": (np.float32, gguf.GGMLQuantizationType.F32),
}
FILE_TYPES = {
    "BF16": gguf.LlamaFileType.MOSTLY_BF16,
    "F16": gguf.LlamaFileType.MOSTLY_F16,
    "F32": gguf.LlamaFileType.ALL_F32,
}
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


# ---------------------------------------------------------------- safetensors, memory-mapped

class Source:
    """One tensor of a safetensors file, read lazily through a memory map."""

    def __init__(self, path: Path, name: str, info: dict, data_start: int):
        self.path, self.name = path, name
        self.dtype = info["dtype"]
        if self.dtype not in DTYPES:
            raise SystemExit(f"hf_to_gguf: {name}: dtype {self.dtype} not supported (BF16, F16, F32)")
        self.shape = [int(d) for d in info["shape"]]
        begin, end = info["data_offsets"]
        self.offset, self.nbytes = data_start + begin, end - begin

    def array(self) -> np.ndarray:
        np_dtype = DTYPES[self.dtype][0]
        count = self.nbytes // np.dtype(np_dtype).itemsize
        return np.memmap(self.path, dtype=np_dtype, mode="r", offset=self.offset,
                         shape=(count,)).reshape(self.shape)

    def as_f32(self) -> np.ndarray:
        a = self.array()
        if self.dtype == "BF16":
            return (a.astype(np.uint32) << 16).view(np.float32)
        return a.astype(np.float32)


def index_safetensors(model_dir: Path) -> dict[str, Source]:
    files = sorted(model_dir.glob("*.safetensors"))
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        files = sorted({model_dir / f for f in json.loads(index.read_text())["weight_map"].values()})
    if not files:
        raise SystemExit(f"hf_to_gguf: no .safetensors in {model_dir}")
    out: dict[str, Source] = {}
    for path in files:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for name, info in header.items():
            if name != "__metadata__":
                out[name] = Source(path, name, info, 8 + n)
    return out


# ---------------------------------------------------------------- what gets written

class Out:
    """One GGUF tensor: its numpy-order shape, ggml type, and how to produce its bytes."""

    def __init__(self, name, shape, ggml_type, parts, transform=None):
        self.name, self.shape, self.ggml_type = name, list(shape), ggml_type
        self.parts, self.transform = parts, transform
        itemsize = 4 if ggml_type == gguf.GGMLQuantizationType.F32 else 2
        self.nbytes = int(np.prod(self.shape)) * itemsize
        self.storage = {gguf.GGMLQuantizationType.F32: np.float32,
                        gguf.GGMLQuantizationType.F16: np.float16,
                        gguf.GGMLQuantizationType.BF16: np.uint16}[ggml_type]

    # write_tensor_data() only needs .nbytes and .tofile(fp)
    def tofile(self, fp):
        for part in self.parts:
            if self.ggml_type == gguf.GGMLQuantizationType.F32:
                a = part.as_f32()
            else:
                a = part.array()
            if self.transform is not None:
                a = self.transform(a)
            np.ascontiguousarray(a).tofile(fp)


def llama_permute(n_head: int, n_head_kv: int | None):
    """convert_hf_to_gguf.LlamaModel.permute (HF rotate-half rows -> interleaved pairs)."""
    def f(w: np.ndarray) -> np.ndarray:
        h = n_head_kv if n_head_kv is not None and n_head != n_head_kv else n_head
        return (w.reshape(h, 2, w.shape[0] // h // 2, *w.shape[1:])
                .swapaxes(1, 2).reshape(w.shape))
    return f


def plan_tensors(arch, cfg: dict, src: dict[str, Source]) -> list[Out]:
    n_layer = cfg["num_hidden_layers"]
    tmap = gguf.get_tensor_name_map(arch, n_layer)
    n_expert = cfg.get("num_experts", cfg.get("num_local_experts"))
    f32_keys = (gguf.MODEL_TENSOR.FFN_GATE_INP, gguf.MODEL_TENSOR.FFN_GATE_INP_SHEXP)
    f32_names = set()
    for key in f32_keys:
        for bid in range(n_layer):
            f32_names.add(gguf.TENSOR_NAMES[key].format(bid=bid) + ".weight")

    def gguf_name(hf: str) -> str:
        name = tmap.get_name(hf, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise SystemExit(f"hf_to_gguf: no GGUF name for {hf} in {gguf.MODEL_ARCH_NAMES[arch]}")
        return name

    def out_type(name: str, shape, dtype: str):
        if len(shape) <= 1 or name.endswith("_norm.weight") or name in f32_names:
            return gguf.GGMLQuantizationType.F32
        return DTYPES[dtype][1]

    plan: list[Out] = []
    used: set[str] = set()
    expert_re = re.compile(r"^model\.layers\.(\d+)\.(mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight$")
    experts: dict[tuple[int, str, str], dict[int, Source]] = {}
    for hf, s in src.items():
        m = expert_re.match(hf)
        if m:
            experts.setdefault((int(m.group(1)), m.group(2), m.group(4)), {})[int(m.group(3))] = s
            used.add(hf)

    llama = arch == gguf.MODEL_ARCH.LLAMA
    n_head, n_head_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads")
    # tensors in the order convert_hf_to_gguf writes them: by layer, experts after the rest
    def layer_key(hf: str):
        m = re.match(r"^model\.layers\.(\d+)\.", hf)
        return (0, -1, hf) if hf.startswith("model.embed") else (
            (1, int(m.group(1)), hf) if m else (2, 0, hf))

    singles = sorted((hf for hf in src if hf not in used), key=layer_key)
    by_layer: dict[int, list[Out]] = {}
    head: list[Out] = []
    tail: list[Out] = []
    for hf in singles:
        if hf.endswith((".rotary_emb.inv_freq", ".attention.masked_bias")):
            continue
        if hf == "lm_head.weight" and cfg.get("tie_word_embeddings") and "model.embed_tokens.weight" in src:
            continue  # convert_hf_to_gguf skips a tied head: llama.cpp reuses token_embd
        s = src[hf]
        name = gguf_name(hf)
        shape = s.shape
        transform = None
        if name.endswith("ffn_gate_inp_shexp.weight") and len(shape) == 2 and shape[0] == 1:
            shape = [shape[1]]  # HF [1, n_embd] -> GGML {n_embd}
            transform = lambda a: a.reshape(-1)  # noqa: E731
        if llama and hf.endswith("self_attn.q_proj.weight"):
            transform = llama_permute(n_head, n_head)
        elif llama and hf.endswith("self_attn.k_proj.weight"):
            transform = llama_permute(n_head, n_head_kv)
        o = Out(name, shape, out_type(name, shape, s.dtype), [s], transform)
        m = re.match(r"^model\.layers\.(\d+)\.", hf)
        if m:
            by_layer.setdefault(int(m.group(1)), []).append(o)
        elif hf.startswith("model.embed"):
            head.append(o)
        else:
            tail.append(o)
    # stacked experts: HF per-expert [rows, cols] -> [n_expert, rows, cols]
    hf_proj = {"gate_proj": "gate_proj", "up_proj": "up_proj", "down_proj": "down_proj",
               "w1": "w1", "w3": "w3", "w2": "w2"}
    for (bid, block, proj), per in sorted(experts.items()):
        if n_expert is None or sorted(per) != list(range(n_expert)):
            raise SystemExit(f"hf_to_gguf: layer {bid} {proj}: experts {sorted(per)[:4]}... "
                             f"but the config says {n_expert}")
        first = per[0]
        if any(p.shape != first.shape or p.dtype != first.dtype for p in per.values()):
            raise SystemExit(f"hf_to_gguf: layer {bid} {proj}: experts of different shapes")
        name = gguf_name(f"model.layers.{bid}.{block}.experts.{hf_proj[proj]}.weight")
        shape = [n_expert] + first.shape
        by_layer.setdefault(bid, []).append(
            Out(name, shape, out_type(name, shape, first.dtype), [per[x] for x in range(n_expert)]))
    for bid in sorted(by_layer):
        head.extend(by_layer[bid])
    return head + tail


# ---------------------------------------------------------------- metadata

def check_supported(arch, cfg: dict) -> None:
    if arch in (gguf.MODEL_ARCH.QWEN3MOE, gguf.MODEL_ARCH.QWEN2MOE):
        if cfg.get("mlp_only_layers") or cfg.get("decoder_sparse_step", 1) != 1:
            raise SystemExit("hf_to_gguf: llama.cpp's qwen*moe runs every layer as MoE; this config has "
                             f"mlp_only_layers={cfg.get('mlp_only_layers')} decoder_sparse_step="
                             f"{cfg.get('decoder_sparse_step')}")
        want = arch == gguf.MODEL_ARCH.QWEN3MOE  # llama.cpp: qwen3moe renormalises, qwen2moe does not
        if bool(cfg.get("norm_topk_prob", False)) != want:
            raise SystemExit(f"hf_to_gguf: norm_topk_prob={cfg.get('norm_topk_prob')} but llama.cpp's "
                             f"{gguf.MODEL_ARCH_NAMES[arch]} uses {want}")
    if cfg.get("use_sliding_window") or (cfg.get("sliding_window") and arch == gguf.MODEL_ARCH.LLAMA
                                         and cfg.get("sliding_window") < cfg.get("max_position_embeddings", 0)):
        raise SystemExit("hf_to_gguf: attention windows are not written (llama.cpp's llama/qwen ignore them)")


def write_params(w: gguf.GGUFWriter, arch, cfg: dict, ftype, name: str) -> None:
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(name)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    if "intermediate_size" in cfg:
        w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    if "num_key_value_heads" in cfg:
        w.add_head_count_kv(cfg["num_key_value_heads"])
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", rope.get("type"))
    if rope_type == "linear" and rope.get("factor") is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    elif rope_type == "yarn" and rope.get("factor") is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    elif rope_type not in (None, "default"):
        raise SystemExit(f"hf_to_gguf: rope scaling {rope_type!r} not written by this script")
    theta = rope.get("rope_theta", cfg.get("rope_theta"))
    if theta is not None:
        w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    n_expert = cfg.get("num_experts", cfg.get("num_local_experts"))
    if n_expert is not None:
        w.add_expert_count(n_expert)
    if "num_experts_per_tok" in cfg:
        w.add_expert_used_count(cfg["num_experts_per_tok"])
    if cfg.get("head_dim") is not None:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    w.add_file_type(ftype)
    if arch in (gguf.MODEL_ARCH.QWEN2MOE, gguf.MODEL_ARCH.QWEN3MOE):
        if cfg.get("moe_intermediate_size") is not None:
            w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        if cfg.get("shared_expert_intermediate_size") is not None:
            w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    if arch == gguf.MODEL_ARCH.LLAMA:
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def looks_special(tok: str) -> bool:  # TextModel.does_token_look_special
    return (tok in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (tok.startswith("<|") and tok.endswith("|>"))
            or (tok.startswith("<｜") and tok.endswith("｜>")) or (tok.startswith("<unused") and tok.endswith(">")))


def write_vocab(w: gguf.GGUFWriter, model_dir: Path, cfg: dict, tokenizer_pre: str | None) -> str:
    tj = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    model = tj["model"]
    if model["type"] != "BPE":
        raise SystemExit(f"hf_to_gguf: tokenizer model {model['type']} not supported (BPE only)")
    vocab_size = cfg["vocab_size"]
    reverse = {i: t for t, i in model["vocab"].items()}
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    if max(list(reverse) + list(added)) >= vocab_size:
        raise SystemExit("hf_to_gguf: token ids past vocab_size")
    sentencepiece = bool(model.get("byte_fallback")) and tj.get("decoder", {}).get("type") == "Sequence"
    tokens: list[str] = []
    types: list[int] = []
    if sentencepiece:  # gguf.LlamaHfVocab, padded as _set_vocab_llama_hf does
        kind = "llama"
        special_ids = {i for i, a in added.items() if a.get("special")}
        scores: list[float] = []
        for i in range(vocab_size):
            tok = reverse.get(i, added[i]["content"] if i in added else None)
            if tok is None:
                tokens.append(f"[PAD{i}]"), scores.append(-1000.0), types.append(gguf.TokenType.UNUSED)
                continue
            tokens.append(tok)
            scores.append(-1000.0)
            if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", tok):
                types.append(gguf.TokenType.BYTE)
            elif i in special_ids:
                types.append(gguf.TokenType.CONTROL)
            elif i in added:
                types.append(gguf.TokenType.USER_DEFINED)
            else:
                types.append(gguf.TokenType.NORMAL)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        special = gguf.SpecialVocab(model_dir, n_vocab=len(tokens))
    else:  # TextModel.get_vocab_base + _set_vocab_gpt2
        kind = "gpt2"
        for i in range(vocab_size):
            if i in added:
                tok = added[i]["content"]
                tokens.append(tok)
                types.append(gguf.TokenType.CONTROL if added[i].get("special") or looks_special(tok)
                             else gguf.TokenType.USER_DEFINED)
            elif i in reverse:
                tokens.append(reverse[i])
                types.append(gguf.TokenType.NORMAL)
            else:
                tokens.append(f"[PAD{i}]")
                types.append(gguf.TokenType.UNUSED)
        if tokenizer_pre is None:
            split = [p.get("pattern", {}).get("Regex") for p in
                     (tj.get("pre_tokenizer") or {}).get("pretokenizers", [])]
            if QWEN2_SPLIT in split:
                tokenizer_pre = "qwen2"
            elif LLAMA3_SPLIT in split:
                tokenizer_pre = "llama-bpe"
            else:
                raise SystemExit("hf_to_gguf: unknown pre-tokenizer split; name one with --tokenizer-pre")
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(tokenizer_pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        special = gguf.SpecialVocab(model_dir, load_merges=True)
    special.add_to_gguf(w, quiet=True)
    return f"{kind} ({len(tokens)} tokens, special ids {special.special_token_ids})"


# ---------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokenizer-pre", help="tokenizer.ggml.pre for a byte-level BPE (default: from the split regex)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    args = ap.parse_args()

    cfg = json.loads((args.model_dir / "config.json").read_text())
    archs = cfg.get("architectures") or []
    if not archs or archs[0] not in ARCHES:
        raise SystemExit(f"hf_to_gguf: architectures {archs} not supported ({', '.join(ARCHES)})")
    arch = ARCHES[archs[0]]
    check_supported(arch, cfg)
    src = index_safetensors(args.model_dir)
    plan = plan_tensors(arch, cfg, src)
    weight_dtypes = {s.dtype for s in src.values() if len(s.shape) >= 2}
    if len(weight_dtypes) != 1:
        raise SystemExit(f"hf_to_gguf: mixed weight dtypes {weight_dtypes}")
    ftype = FILE_TYPES[weight_dtypes.pop()]
    total = sum(o.nbytes for o in plan)
    if args.dry_run:
        for o in plan:
            print(f"{o.name:32s} {gguf.GGMLQuantizationType(o.ggml_type).name:5s} {o.shape}")
        print(f"{len(plan)} tensors, {total / 1e9:.3f} GB")
        return 0

    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".partial")
    w = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[arch])
    write_params(w, arch, cfg, ftype, args.model_dir.name)
    vocab = write_vocab(w, args.model_dir, cfg, args.tokenizer_pre)
    for o in plan:
        w.add_tensor_info(o.name, o.shape, np.dtype(o.storage), o.nbytes, raw_dtype=o.ggml_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    done = 0
    for o in plan:
        w.write_tensor_data(o)
        done += o.nbytes
        if o.name.endswith("_exps.weight"):
            print(f"hf_to_gguf: {o.name} ({done / 1e9:.2f}/{total / 1e9:.2f} GB)", file=sys.stderr, flush=True)
    w.close()
    os.replace(tmp, args.out)
    print(f"hf_to_gguf: wrote {args.out}: {gguf.MODEL_ARCH_NAMES[arch]}, {len(plan)} tensors, "
          f"{total / 1e9:.3f} GB of weights, {ftype.name}, tokenizer {vocab}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
