#!/usr/bin/env python3
"""Checks the GGUF oracle (tests/reference/gguf_to_hf.py + numpy_llama.py, and
tests/reference/gguf_tokenizer_reference.py) against Hugging Face transformers itself.

Tessera's GGUF tests compare its greedy output on a .gguf file with numpy_llama.py run on
the folder gguf_to_hf.py converts the file into, and its tokenizer with
gguf_tokenizer_reference.py. This script is their oracle, on a real GGUF file (default:
SmolLM2-135M-Instruct Q4_1, which scripts/setup.sh fetches):

- weights: every tensor the converter writes must equal, within 1e-6, the one
  AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float32) loads
  (transformers' own name mapping, q/k un-permutation and config; its llama path
  dequantizes with gguf-py, as the converter does), and no weight may be missing or left
  over on either side;
- dequantization: gguf-py's numpy dequantizer (the converter's) against transformers'
  independent torch one (integrations/gguf/dequant.py) on every quantized tensor;
- config: the converter's config.json against the config transformers builds;
- logits of every prompt position, numpy_llama against transformers run in float64
  throughout (check_numpy_reference.float64_islands, tolerance 1e-6) and as shipped in
  float32 (tolerance 1e-4), both as max |diff| / (1 + |transformers|); numpy_llama with
  llama.cpp's q/k permutation left in must differ by more than 1e-3, or the comparison
  could not see a converter that forgot to undo it;
- greedy ids: MAX_NEW_TOKENS steps of numpy_llama against the same steps of transformers
  (float64 and float32), full recompute each step, EOS ignored;
- tokenization: AutoTokenizer.from_pretrained(dir, gguf_file=...) (transformers' GGUF
  tokenizer, with torch) against gguf_tokenizer_reference.py --stock-pre-tokenizer (the
  torch-free path, in a subprocess) on texts and the chat template: must be identical;
  and gguf_tokenizer_reference.py as the tests use it (llama.cpp's pre-tokenizer rule for
  tokenizer.ggml.pre) against a small byte-level BPE written here from llama.cpp's
  regexes (llama-vocab.cpp), which must agree on every text. Where stock transformers
  differs from that rule is recorded, not failed.

How to run (needs network for pip the first time; see check_numpy_reference.py for the
venv, which this shares; about 4 minutes on 2 cores):

  python3 scripts/reference/check_gguf_reference.py [--gguf FILE.gguf]
      [--venv ~/.cache/tessera/hf-venv] [--out benchmarks/results/gguf_reference_vs_transformers.json]

It installs PINS into the venv when its stamp is missing and runs itself again inside it.
Not a ctest: it needs PyPI and torch.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
REFERENCE = os.path.join(SOURCE, "tests", "reference")
sys.path.insert(0, REFERENCE)  # numpy_llama, gguf_to_hf, gguf_tokenizer_reference.
sys.path.insert(0, HERE)  # check_numpy_reference (float64_islands, relative_max).

PINS = ["torch==2.15.0", "transformers==5.25.0", "safetensors==0.8.0", "numpy==2.4.6",
        "gguf==0.19.0", "tokenizers==0.23.3", "jinja2==3.1.6",
        # transformers refuses to load a GGUF file without accelerate.
        "accelerate==1.16.0"]
WEIGHT_TOLERANCE = 1e-6
TOLERANCE = 1e-6  # numpy float64 against transformers in float64 throughout.
TOLERANCE_FLOAT32 = 1e-4  # against transformers as shipped (float32 weights and arithmetic).
MAX_NEW_TOKENS = 48
DEFAULT_VENV = os.path.expanduser("~/.cache/tessera/hf-venv")
DEFAULT_GGUF = os.environ.get("TESSERA_SMOLLM2_GGUF", os.path.expanduser(
    "~/.cache/tessera/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
DEFAULT_OUT = os.path.join(SOURCE, "benchmarks", "results", "gguf_reference_vs_transformers.json")

# Prompts of the logits and greedy comparison: (name, text or chat messages).
PROMPTS = [
    ("text_fox", "The quick brown fox jumps over the lazy dog. Then the fox"),
    ("chat_france", [{"role": "user", "content": "What is the capital of France?"}]),
    ("chat_story", [{"role": "user", "content": "Write a short story about a robot who learns to paint."}]),
]
# Texts of the tokenization comparison. The whitespace-before-digit ones are where stock
# transformers and llama.cpp's smollm rule part ways.
TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "12345 678",
    "pi is 3.14159, e is 2.71828; 1,000,000 + 42 = 1000042",
    "Hi, there! (ok?) -- \"quoted\" 'single' [x] {y} <z> @#$%^&*_+=|\\/~`",
    "def f(x):\n    return x**2  # square\n\nprint(f(12))\n",
    "héllo wörld, naïve café — 日本語のテキスト, 한국어, Ελληνικά, 🙂🚀👍🏽",
    "line one\nline two\n\n\nline five\r\n\ttabbed  double  space   ",
    "a  1",
    "    1. item\n    2. item",
    "x   42 and  7",
    "<|im_start|>user\nHi<|im_end|>\n",
    "It's, we're, they've, I'm, you'll, he'd",
]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "Count: 1  2   3"}],
    [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke about 42 cats."}],
]


def ensure_venv(venv):
    """Re-runs this script inside `venv` (PINS installed when its stamp is stale)."""
    python = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    stamp = os.path.join(venv, "tessera-gguf-pins.txt")  # Apart from check_numpy_reference's.
    pinned = os.path.exists(stamp) and open(stamp).read().split() == PINS
    if not pinned:
        if not os.path.exists(python):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *PINS], check=True)
        with open(stamp, "w") as f:
            f.write("\n".join(PINS) + "\n")
    os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])


# --- an independent byte-level BPE with llama.cpp's pre-tokenizer --------------------------

# llama-vocab.cpp's regexes for LLAMA_VOCAB_PRE_TYPE_SMOLLM (and STARCODER...): each splits
# the pieces of the one before; text a regex does not match stays a piece of its own.
LLAMACPP_SPLITS = {
    "smollm": [r"\p{N}",
               r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"],
}


def bytes_to_unicode():
    """GPT-2's byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class LlamaCppStyleBpe:
    """Byte-level BPE from the GGUF's tokens and merges, split as llama.cpp splits: control
    tokens (token_type 3) matched whole first, then the pre-type's regexes, then merges by
    rank. Written from llama-vocab.cpp's description, sharing no code with `tokenizers`."""

    def __init__(self, gguf_path):
        import gguf
        import regex

        reader = gguf.GGUFReader(gguf_path)
        value = lambda k: reader.fields[k].contents()  # noqa: E731
        self.tokens = value("tokenizer.ggml.tokens")
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(value("tokenizer.ggml.merges"))}
        types = value("tokenizer.ggml.token_type")
        specials = sorted((t for t, ty in zip(self.tokens, types) if ty == 3), key=len, reverse=True)
        self.special = regex.compile("|".join(regex.escape(s) for s in specials))
        self.splits = [regex.compile(p) for p in LLAMACPP_SPLITS[value("tokenizer.ggml.pre")]]
        self.byte_chars = bytes_to_unicode()

    @staticmethod
    def _split(pattern, text):
        pieces, last = [], 0
        for m in pattern.finditer(text):
            if m.start() > last:
                pieces.append(text[last:m.start()])
            pieces.append(m.group())
            last = m.end()
        if last < len(text):
            pieces.append(text[last:])
        return pieces

    def _bpe(self, word):
        symbols = [self.byte_chars[b] for b in word.encode("utf-8")]
        while len(symbols) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 60), i)
                     for i, (a, b) in enumerate(zip(symbols, symbols[1:]))]
            rank, i = min(pairs)
            if rank == 1 << 60:
                break
            symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
        return [self.ids[s] for s in symbols]

    def encode(self, text):
        ids = []
        for piece in self._split(self.special, text):
            if self.special.fullmatch(piece):
                ids.append(self.ids[piece])
                continue
            pieces = [piece]
            for pattern in self.splits:
                pieces = [p for q in pieces for p in self._split(pattern, q)]
            for p in pieces:
                ids.extend(self._bpe(p))
        return ids


# --- the comparisons ----------------------------------------------------------------------

def file_facts(path):
    import collections

    import gguf

    reader = gguf.GGUFReader(path)
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    value = lambda k: reader.fields[k].contents() if k in reader.fields else None  # noqa: E731
    token_types = collections.Counter(value("tokenizer.ggml.token_type") or [])
    tokens = value("tokenizer.ggml.tokens") or []
    return {
        "file": os.path.basename(path),
        "bytes": os.path.getsize(path),
        "sha256": sha.hexdigest(),
        "tensor_types": dict(collections.Counter(t.tensor_type.name for t in reader.tensors)),
        "token_types": {str(k): v for k, v in sorted(token_types.items())},
        "control_tokens": [t for t, ty in zip(tokens, value("tokenizer.ggml.token_type") or [])
                           if ty == 3],
        "tokenizer": {k: value(f"tokenizer.ggml.{k}") for k in (
            "model", "pre", "bos_token_id", "eos_token_id", "unknown_token_id",
            "padding_token_id", "add_bos_token", "add_eos_token", "add_space_prefix")},
        "chat_template": value("tokenizer.chat_template"),
    }


def compare_weights(model, hf_dir, config):
    import numpy as np
    import numpy_llama

    ours = numpy_llama.load_weights(hf_dir)  # float64 of the float32 file: exact.
    theirs = {k: v.double().numpy() for k, v in model.state_dict().items()}
    if config["tie_word_embeddings"] and "lm_head.weight" in theirs:
        ours["lm_head.weight"] = ours["model.embed_tokens.weight"]
    worst, worst_name, identical, shape_mismatch = 0.0, None, 0, []
    for name in sorted(set(ours) & set(theirs)):
        if ours[name].shape != theirs[name].shape:
            shape_mismatch.append(name)
            continue
        diff = float(np.max(np.abs(ours[name] - theirs[name]))) if ours[name].size else 0.0
        identical += diff == 0.0
        if diff > worst or worst_name is None:
            worst, worst_name = diff, name
    return {
        "tensors_compared": len(set(ours) & set(theirs)),
        "identical": identical,
        "max_abs_diff": worst,
        "max_abs_diff_tensor": worst_name,
        "only_in_converter": sorted(set(ours) - set(theirs)),
        "only_in_transformers": sorted(set(theirs) - set(ours)),
        "shape_mismatch": shape_mismatch,
        "pass": (worst <= WEIGHT_TOLERANCE and not shape_mismatch and
                 set(ours) == set(theirs)),
    }


def compare_dequantization(gguf_path):
    """gguf-py's dequantize (the converter's) against transformers' torch dequantizer."""
    import gguf
    import numpy as np
    from gguf_to_hf import dequantized
    from transformers.integrations.gguf.dequant import GGML_BLOCK, GGML_NAME
    from transformers.integrations.gguf.dequant import dequantize as torch_dequantize
    from transformers.integrations.gguf.reader import GgufHeader, load_gguf_state_dict

    header = GgufHeader.from_file(gguf_path)
    raw = load_gguf_state_dict(header)
    per_type = {}
    for tensor in gguf.GGUFReader(gguf_path).tensors:
        info = next(i for i in header.tensors if i.name == tensor.name)
        if info.ggml_type not in GGML_BLOCK:
            continue
        theirs = torch_dequantize(raw[tensor.name][...].reshape(-1), info.ggml_type).numpy()
        ours = dequantized(tensor).reshape(-1)
        diff = float(np.max(np.abs(ours.astype(np.float64) - theirs)))
        entry = per_type.setdefault(GGML_NAME[info.ggml_type],
                                    {"tensors": 0, "max_abs_diff": 0.0, "identical": 0})
        entry["tensors"] += 1
        entry["identical"] += diff == 0.0
        entry["max_abs_diff"] = max(entry["max_abs_diff"], diff)
    return {"by_type": per_type,
            "pass": all(e["max_abs_diff"] <= WEIGHT_TOLERANCE for e in per_type.values())}


def compare_config(model, config):
    c = model.config
    rope = getattr(c, "rope_parameters", None) or {}
    theirs = {
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": getattr(c, "head_dim", None),
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": rope.get("rope_theta", getattr(c, "rope_theta", None)),
        "max_position_embeddings": c.max_position_embeddings,
        "vocab_size": c.vocab_size,
        "tie_word_embeddings": c.tie_word_embeddings,
        "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id,
    }
    differ = {k: {"converter": config.get(k), "transformers": v}
              for k, v in theirs.items() if config.get(k) != v}
    return {"transformers": theirs, "rope_type": rope.get("rope_type"), "differ": differ,
            "pass": not differ and rope.get("rope_type", "default") == "default"}


def greedy_torch(model, prompt, steps, islands=None):
    """(ids, [steps, vocab] logits) of greedy decoding, the whole sequence each step."""
    import contextlib

    import numpy as np
    import torch

    ids, logits = list(prompt), []
    with torch.no_grad(), (islands or contextlib.nullcontext()):
        for _ in range(steps):
            step = model(torch.tensor([ids])).logits[0, -1].double().numpy()
            logits.append(step)
            ids.append(int(np.argmax(step)))
    return ids[len(prompt):], np.stack(logits)


def top2_margin(logits):
    import numpy as np
    top = np.sort(logits, axis=-1)[..., -2:]
    return float(np.min(top[..., 1] - top[..., 0]))


def permuted_again(reference):
    """numpy_llama on the weights with llama.cpp's q/k row permutation left in (a broken
    converter): the comparison must see it, or it could not see the real thing."""
    import copy

    broken = copy.copy(reference)
    broken.w = dict(reference.w)
    c = reference.config
    for name, w in reference.w.items():
        for proj, heads in (("q_proj", c["num_attention_heads"]), ("k_proj", c["num_key_value_heads"])):
            if name.endswith(f"self_attn.{proj}.weight"):
                # convert_hf_to_gguf's LlamaModel.permute.
                broken.w[name] = (w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:])
                                  .swapaxes(1, 2).reshape(w.shape))
    return broken


def compare_prompt(name, prompt, reference, model32, model64, tokenizer):
    import numpy as np
    import torch
    from check_numpy_reference import float64_islands, relative_max

    t0 = time.time()
    ours_logits = reference.forward(prompt)
    broken_logits = permuted_again(reference).forward(prompt)
    with torch.no_grad():
        hf32 = model32(torch.tensor([prompt])).logits[0].double().numpy()
        with float64_islands(model64, inv_freq=reference.inv_freq):
            hf64 = model64(torch.tensor([prompt])).logits[0].numpy()
    ours_ids, ours_steps = reference.greedy(prompt, MAX_NEW_TOKENS)
    numpy_seconds = time.time() - t0
    ids64, steps64 = greedy_torch(model64, prompt, MAX_NEW_TOKENS,
                                  float64_islands(model64, inv_freq=reference.inv_freq))
    ids32, steps32 = greedy_torch(model32, prompt, MAX_NEW_TOKENS)

    def same_steps(a, b):
        """Steps computed on the same sequence: up to and including the first divergence."""
        return min(len(a), next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a)) + 1)

    n64, n32 = same_steps(ours_ids, ids64), same_steps(ours_ids, ids32)

    result = {
        "prompt_ids": prompt,
        "prompt_tokens": len(prompt),
        "max_rel_diff_prompt_logits_float64": relative_max(ours_logits, hf64),
        "max_rel_diff_prompt_logits_float32": relative_max(ours_logits, hf32),
        "max_rel_diff_prompt_logits_float64_qk_permutation_left_in": relative_max(broken_logits, hf64),
        "max_abs_logit": float(np.max(np.abs(hf64))),
        "numpy_generated_ids": ours_ids,
        "numpy_generated_text": tokenizer.decode(ours_ids, skip_special_tokens=False),
        "transformers_float64_generated_ids_equal": ours_ids == ids64,
        "transformers_float32_generated_ids_equal": ours_ids == ids32,
        # Logits of every step whose sequence both sides share.
        "max_rel_diff_step_logits_float64": relative_max(ours_steps[:n64], steps64[:n64]),
        "max_rel_diff_step_logits_float32": relative_max(ours_steps[:n32], steps32[:n32]),
        "numpy_min_top2_logit_margin": top2_margin(ours_steps),
        "numpy_seconds_forward_and_greedy": round(numpy_seconds, 1),
    }
    result["pass"] = (result["max_rel_diff_prompt_logits_float64"] <= TOLERANCE and
                      result["max_rel_diff_prompt_logits_float64_qk_permutation_left_in"] >
                      1e3 * TOLERANCE and
                      result["max_rel_diff_prompt_logits_float32"] <= TOLERANCE_FLOAT32 and
                      result["transformers_float64_generated_ids_equal"] and
                      result["max_rel_diff_step_logits_float64"] <= TOLERANCE and
                      result["max_rel_diff_step_logits_float32"] <= TOLERANCE_FLOAT32 and
                      result["transformers_float32_generated_ids_equal"])
    print(f"{name:12s} prompt {len(prompt):3d} tokens: logits rel diff float64 "
          f"{result['max_rel_diff_prompt_logits_float64']:.2e}, float32 "
          f"{result['max_rel_diff_prompt_logits_float32']:.2e} (q/k permutation left in "
          f"{result['max_rel_diff_prompt_logits_float64_qk_permutation_left_in']:.2e}); greedy {MAX_NEW_TOKENS} equal: "
          f"float64 {ours_ids == ids64}, float32 {ours_ids == ids32}; min margin "
          f"{result['numpy_min_top2_logit_margin']:.3f}" + ("" if result["pass"] else "  FAIL"),
          flush=True)
    print(f"             {result['numpy_generated_text']!r}", flush=True)
    return result


def compare_tokenization(gguf_path, auto_tokenizer):
    """AutoTokenizer against the torch-free reference (stock), and the reference as the
    tests use it against LlamaCppStyleBpe."""
    request = {"texts": TEXTS, "chats": CHATS}
    records = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "request.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(request, f)
        for mode, extra in (("stock", ["--stock-pre-tokenizer"]), ("fixed", [])):
            out = os.path.join(tmp, f"{mode}.json")
            subprocess.run([sys.executable, os.path.join(REFERENCE, "gguf_tokenizer_reference.py"),
                            "--gguf", gguf_path, "--request", path, "--out", out, *extra],
                           check=True, stderr=subprocess.DEVNULL)
            with open(out, encoding="utf-8") as f:
                records[mode] = json.load(f)
    bpe = LlamaCppStyleBpe(gguf_path) if records["fixed"]["tokenizer_pre"] in LLAMACPP_SPLITS else None
    texts, chats = [], []
    for i, text in enumerate(TEXTS):
        auto = auto_tokenizer.encode(text, add_special_tokens=True)
        stock, fixed = records["stock"]["texts"][i]["ids"], records["fixed"]["texts"][i]["ids"]
        entry = {"text": text, "ids": fixed, "torch_free_equals_auto_tokenizer": stock == auto,
                 "stock_transformers_ids_differ": None if stock == fixed else stock,
                 "decodes_back": auto_tokenizer.decode(fixed, skip_special_tokens=False) == text}
        if bpe is not None:
            entry["equals_llamacpp_rule_bpe"] = bpe.encode(text) == fixed
        texts.append(entry)
    for i, messages in enumerate(CHATS):
        rendered = auto_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        auto = auto_tokenizer.encode(rendered, add_special_tokens=False)
        stock, fixed = records["stock"]["chats"][i], records["fixed"]["chats"][i]
        entry = {"messages": messages, "rendered": fixed["rendered"], "ids": fixed["ids"],
                 "torch_free_equals_auto_tokenizer": stock["ids"] == auto and
                 stock["rendered"] == rendered,
                 "stock_transformers_ids_differ": None if stock["ids"] == fixed["ids"] else stock["ids"]}
        if bpe is not None:
            entry["equals_llamacpp_rule_bpe"] = bpe.encode(fixed["rendered"]) == fixed["ids"]
        chats.append(entry)
    notes = {k: v for k, v in records["fixed"].items() if k not in ("texts", "chats", "gguf")}
    entries = texts + chats
    ok = all(e["torch_free_equals_auto_tokenizer"] and e.get("equals_llamacpp_rule_bpe", True)
             for e in entries) and all(e["decodes_back"] for e in texts)
    print(f"tokenization: {len(TEXTS)} texts, {len(CHATS)} chats; torch-free == AutoTokenizer: "
          f"{all(e['torch_free_equals_auto_tokenizer'] for e in entries)}; == llama.cpp-rule "
          f"BPE: {all(e.get('equals_llamacpp_rule_bpe', True) for e in entries)}; stock "
          f"transformers differs on {sum(e['stock_transformers_ids_differ'] is not None for e in entries)}"
          + ("" if ok else "  FAIL"), flush=True)
    return {"reference": notes, "auto_tokenizer_class": type(auto_tokenizer).__name__,
            "llamacpp_rule_bpe": bpe is not None, "texts": texts, "chats": chats, "pass": ok}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--venv", default=DEFAULT_VENV)
    parser.add_argument("--gguf", default=DEFAULT_GGUF)
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if not os.path.exists(args.gguf):
        sys.exit(f"{args.gguf} not found (scripts/setup.sh fetches it; or pass --gguf)")
    ensure_venv(args.venv)
    os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF progress bars.

    import gguf
    import numpy as np
    import tokenizers
    import torch
    import transformers

    import gguf_to_hf
    import numpy_llama

    torch.manual_seed(0)
    gguf_path = os.path.abspath(args.gguf)
    folder, name = os.path.dirname(gguf_path), os.path.basename(gguf_path)
    record = {
        "what": "the GGUF oracle (tests/reference/gguf_to_hf.py + numpy_llama.py, "
                "gguf_tokenizer_reference.py) against Hugging Face transformers' GGUF loader "
                "and tokenizer",
        "how": " ".join(["python3", os.path.relpath(os.path.abspath(__file__), SOURCE),
                         *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "commit": subprocess.run(["git", "-C", SOURCE, "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True).stdout.strip(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__,
                     "gguf": getattr(gguf, "__version__", None) or _dist_version("gguf"),
                     "tokenizers": tokenizers.__version__},
        "gguf": file_facts(gguf_path),
        "tolerances": {"weights_abs": WEIGHT_TOLERANCE, "logits_float64_rel": TOLERANCE,
                       "logits_float32_rel": TOLERANCE_FLOAT32},
        "metric": "logits: max over positions and vocabulary of |numpy - transformers| / "
                  "(1 + |transformers|)",
        "max_new_tokens": MAX_NEW_TOKENS,
    }
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = os.path.join(tmp, "hf")
        t0 = time.time()
        config = gguf_to_hf.convert(gguf_path, hf_dir)
        record["converter_seconds"] = round(time.time() - t0, 1)
        record["converter_config"] = config
        print(f"converted in {record['converter_seconds']} s", flush=True)

        loaded = {}
        for dtype in (torch.float32, torch.float64):
            model, info = transformers.AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=name, dtype=dtype, attn_implementation="sdpa",
                output_loading_info=True)
            model.eval()
            loaded[dtype] = model
            record.setdefault("loading_problems", {})[str(dtype)] = {
                k: sorted(v) for k, v in info.items() if v}
        model32, model64 = loaded[torch.float32], loaded[torch.float64]
        record["weights"] = compare_weights(model32, hf_dir, config)
        print(f"weights: {record['weights']['tensors_compared']} tensors, "
              f"{record['weights']['identical']} identical, max |diff| "
              f"{record['weights']['max_abs_diff']:.3g}", flush=True)
        record["dequantization"] = compare_dequantization(gguf_path)
        print(f"dequantization gguf-py vs transformers torch: {record['dequantization']['by_type']}",
              flush=True)
        record["config"] = compare_config(model32, config)

        auto_tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
        record["tokenization"] = compare_tokenization(gguf_path, auto_tokenizer)

        # Prompt ids as the tests make them: gguf_tokenizer_reference with llama.cpp's rule.
        import gguf_tokenizer_reference
        tok, _ = gguf_tokenizer_reference.load(gguf_path)
        reference = numpy_llama.Model(hf_dir)
        record["prompts"] = {}
        for pname, prompt in PROMPTS:
            if isinstance(prompt, str):
                ids = gguf_tokenizer_reference.encode_text(tok, prompt)
            else:
                ids = gguf_tokenizer_reference.encode_chat(tok, prompt)[1]
            record["prompts"][pname] = compare_prompt(pname, ids, reference, model32, model64,
                                                      auto_tokenizer)
            record["prompts"][pname]["prompt"] = prompt

    record["loading_pass"] = not any(record["loading_problems"].values())
    record["pass"] = (record["loading_pass"] and record["weights"]["pass"] and
                      record["dequantization"]["pass"] and record["config"]["pass"] and
                      record["tokenization"]["pass"] and
                      all(p["pass"] for p in record["prompts"].values()))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}: {'pass' if record['pass'] else 'FAIL'}")
    return 0 if record["pass"] else 1


def _dist_version(name):
    from importlib.metadata import version
    return version(name)


if __name__ == "__main__":
    sys.exit(main())
