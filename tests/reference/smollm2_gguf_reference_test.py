#!/usr/bin/env python3
"""Tessera on a real GGUF model against the numpy oracle: SmolLM2-135M-Instruct, Q4_1.

The file (llama.cpp's Q4_1 of HuggingFaceTB's chat model: a Q8_0 embedding tied as the
output, 210 Q4_1 and 61 F32 tensors; 30 layers, hidden 576, 9 heads over 3 KV heads, RoPE
base 100000; a byte-level BPE with llama.cpp's "smollm" pre-tokenizer, no BOS, and a
ChatML template) is served by `tessera run --model FILE.gguf`. Two checks:

- greedy ids: for each prompt, MAX_NEW_TOKENS greedy ids (EOS ignored) must be those of
  numpy_llama.py on the float32 Hugging Face folder gguf_to_hf.py makes from the same file
  (dequantized by llama.cpp's gguf-py, nothing shared with Tessera's GGUF reader). Tessera
  computes in float32 and numpy in float64 on the same dequantized weights, so the two may
  part only where numpy's own top two are within NEAR_TIE; the prompts were chosen with no
  step that close (see --reference-only), so in practice every id must match;
- prompt ids: `tessera run --prompt TEXT --json` must give the ids of
  gguf_tokenizer_reference.py (Hugging Face transformers' GGUF tokenizer, with llama.cpp's
  digit rule for pre=smollm) for plain texts, texts that stress the pre-tokenizer, and chat
  prompts rendered by the file's template through transformers' apply_chat_template.

scripts/reference/check_gguf_reference.py checks both oracles against transformers.

Environment: TESSERA_SMOLLM2_GGUF (default ~/.cache/tessera/models/SmolLM2-135M-Instruct.
Q4_1.gguf; absent: skipped, and a failure under CI=true, since scripts/setup.sh fetches
it), TESSERA_BIN (default build/bin/tessera under the source root), TESSERA_TOKENIZER_PYTHON
(a python with transformers==5.25.0, tokenizers==0.23.3, gguf==0.19.0 and jinja2==3.1.6;
default: this one; without them: skipped, or failed under CI=true). This python needs
numpy and gguf (requirements-dev.txt).

  python3 tests/reference/smollm2_gguf_reference_test.py -v
  python3 tests/reference/smollm2_gguf_reference_test.py --reference-only
      (the reference side alone: prompt ids, numpy's greedy ids and text, the smallest
      top-two logit margin, timings; no tessera binary needed)

About 2.5 minutes on 2 cores, nearly all of it numpy's forward passes (the whole sequence
every step, no KV cache).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

# Where scripts/setup.sh puts it: $TESSERA_CACHE_DIR, $XDG_CACHE_HOME/tessera or ~/.cache/tessera.
_CACHE = (os.environ.get("TESSERA_CACHE_DIR")
          or (os.path.join(os.environ["XDG_CACHE_HOME"], "tessera") if os.environ.get("XDG_CACHE_HOME")
              else os.path.expanduser("~/.cache/tessera")))
GGUF = os.environ.get("TESSERA_SMOLLM2_GGUF",
                      os.path.join(_CACHE, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
TESSERA = os.environ.get("TESSERA_BIN", os.path.join(SOURCE, "build", "bin", "tessera"))
TOKENIZER_PYTHON = os.environ.get("TESSERA_TOKENIZER_PYTHON", sys.executable)
MAX_NEW_TOKENS = 48
# A divergence from numpy is accepted only where numpy's logit of its own choice exceeds
# its logit of Tessera's by less than this (float32 against float64 on the same weights
# moves these logits by ~1e-3; transformers' float32 forward stays within 6e-5 relative).
NEAR_TIE = 0.02

# Greedy prompts: (name, text, or a user message rendered through the chat template).
PROMPTS = [
    ("text_eiffel", "The Eiffel Tower is located in"),
    ("text_france", "The capital of France is"),
    ("text_code", "def fibonacci(n):\n"),
    ("chat_france", [{"role": "user", "content": "What is the capital of France?"}]),
    ("chat_poem", [{"role": "user", "content": "Write a short poem about the ocean."}]),
]
# Tokenizer-only texts: digits (split one by one), whitespace before digits (where stock
# transformers and llama.cpp's smollm rule part), punctuation, code, Unicode, newlines,
# special-token text, contractions.
TOKENIZER_TEXTS = [
    "12345 678",
    "pi is 3.14159, e is 2.71828; 1,000,000 + 42 = 1000042",
    "a  1",
    "    1. item\n    2. item",
    "Hi, there! (ok?) -- \"quoted\" 'single' [x] {y} <z> @#$%^&*_+=|\\/~`",
    "def f(x):\n    return x**2  # square\n\nprint(f(12))\n",
    "héllo wörld, naïve café — 日本語のテキスト, 한국어, Ελληνικά, 🙂🚀👍🏽",
    "line one\nline two\n\n\nline five\r\n\ttabbed  double  space   ",
    "<|im_start|>user\nHi<|im_end|>\n",
    "It's, we're, they've, I'm, you'll, he'd",
]


def _missing(message):
    """Skips, or fails under CI=true (a missing oracle must not pass silently there)."""
    if os.environ.get("CI") in ("true", "1"):
        raise AssertionError(message + " and CI=true")
    raise unittest.SkipTest(message)


_REFERENCE_TOKENS = []


def reference_tokens():
    """gguf_tokenizer_reference.py's record for every prompt and tokenizer text (cached)."""
    if not _REFERENCE_TOKENS:
        _REFERENCE_TOKENS.append(_run_reference_tokenizer())
    return _REFERENCE_TOKENS[0]


def _run_reference_tokenizer():
    probe = subprocess.run([TOKENIZER_PYTHON, "-c", "import transformers, tokenizers, gguf, jinja2"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        _missing(f"{TOKENIZER_PYTHON} cannot import transformers/tokenizers/gguf/jinja2 "
                 f"({probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else '?'}); "
                 "set TESSERA_TOKENIZER_PYTHON (see gguf_tokenizer_reference.py)")
    texts = [p for _, p in PROMPTS if isinstance(p, str)] + TOKENIZER_TEXTS
    chats = [p for _, p in PROMPTS if not isinstance(p, str)]
    with tempfile.TemporaryDirectory() as tmp:
        request = os.path.join(tmp, "request.json")
        with open(request, "w", encoding="utf-8") as f:
            json.dump({"texts": texts, "chats": chats}, f)
        out = os.path.join(tmp, "reference.json")
        result = subprocess.run([TOKENIZER_PYTHON, os.path.join(HERE, "gguf_tokenizer_reference.py"),
                                 "--gguf", GGUF, "--request", request, "--out", out],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise AssertionError(f"gguf_tokenizer_reference.py failed: {result.stderr.strip()}")
        with open(out, encoding="utf-8") as f:
            return json.load(f)


def prompt_ids(record):
    """{prompt name: ids} from a reference_tokens() record."""
    by_text = {t["text"]: t["ids"] for t in record["texts"]}
    chats = iter(record["chats"])
    return {name: by_text[p] if isinstance(p, str) else next(chats)["ids"] for name, p in PROMPTS}


class NumpyReference:
    """numpy_llama's greedy ids on the GGUF, converted once per process."""

    def __init__(self):
        import gguf_to_hf
        import numpy_llama

        self.tmp = tempfile.TemporaryDirectory(prefix="tessera-smollm2-gguf-")
        start = time.time()
        gguf_to_hf.convert(GGUF, self.tmp.name)
        self.model = numpy_llama.Model(self.tmp.name)
        self.setup_seconds = time.time() - start

    def greedy(self, ids):
        """(generated ids, [steps, vocab] logits, seconds)."""
        start = time.time()
        generated, logits = self.model.greedy(ids, MAX_NEW_TOKENS)
        return generated, logits, time.time() - start

    def close(self):
        self.tmp.cleanup()


def top2_margins(logits):
    import numpy as np
    top = np.sort(logits, axis=-1)[:, -2:]
    return top[:, 1] - top[:, 0]


def run_tessera(*args):
    """`tessera run --model GGUF ARGS --temperature 0 --json --quiet` as a dict."""
    if not os.path.exists(TESSERA):
        raise AssertionError(f"{TESSERA} is missing: build the tessera target or set TESSERA_BIN")
    command = [TESSERA, "run", "--model", GGUF, "--temperature", "0", "--json", "--quiet", *args]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"tessera run failed ({result.returncode}): {result.stderr.strip()}")
    return json.loads(result.stdout)


def _require_gguf():
    if not os.path.exists(GGUF):
        _missing(f"SmolLM2 GGUF not found at {GGUF} (scripts/setup.sh fetches it; or set "
                 "TESSERA_SMOLLM2_GGUF)")


class TokenizerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _require_gguf()
        cls.reference = reference_tokens()

    def test_prompt_ids_match_reference_tokenizer(self):
        cases = [(t["text"], t["ids"]) for t in self.reference["texts"]]
        cases += [(c["rendered"], c["ids"]) for c in self.reference["chats"]]
        for text, ids in cases:
            with self.subTest(text=text):
                ours = run_tessera("--prompt", text, "--max-tokens", "1")["prompt_ids"]
                self.assertEqual(ours, ids)


class GreedyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _require_gguf()
        cls.ids = prompt_ids(reference_tokens())
        cls.numpy = NumpyReference()

    @classmethod
    def tearDownClass(cls):
        cls.numpy.close()

    def test_greedy_ids_match_numpy(self):
        for name, _ in PROMPTS:
            with self.subTest(prompt=name):
                prompt = self.ids[name]
                ours = run_tessera("--prompt-ids", ",".join(map(str, prompt)),
                                   "--max-tokens", str(MAX_NEW_TOKENS), "--ignore-eos")
                generated = ours["generated_ids"]
                expected, logits, _ = self.numpy.greedy(prompt)  # After tessera: ~12 s each.
                self.assertEqual(len(generated), MAX_NEW_TOKENS, ours)
                step = next((i for i, (a, b) in enumerate(zip(generated, expected)) if a != b), None)
                if step is None:
                    continue
                gap = float(logits[step][expected[step]] - logits[step][generated[step]])
                message = (f"step {step}: tessera chose {generated[step]}, numpy {expected[step]} "
                           f"(numpy logit gap {gap:.4g}); tessera {generated}, numpy {expected}")
                self.assertLess(gap, NEAR_TIE, message)
                print(f"\n{name}: accepted a near tie at step {step}: {message}", file=sys.stderr)


def reference_only():
    """Prints the reference side (ids, greedy text, margins, timings) without tessera."""
    if not os.path.exists(GGUF):
        sys.exit(f"{GGUF} not found (set TESSERA_SMOLLM2_GGUF)")
    start = time.time()
    record = reference_tokens()
    tokenizer_seconds = time.time() - start
    ids = prompt_ids(record)
    numpy = NumpyReference()
    print(f"reference tokenizer {tokenizer_seconds:.1f} s; conversion and numpy load "
          f"{numpy.setup_seconds:.1f} s")
    decoder = _decoder()
    total = 0.0
    try:
        for name, prompt in PROMPTS:
            generated, logits, seconds = numpy.greedy(ids[name])
            margins = top2_margins(logits)
            total += seconds
            print(json.dumps({"prompt": name, "prompt_tokens": len(ids[name]),
                              "prompt_ids": ids[name], "generated_ids": generated,
                              "text": decoder(generated),
                              "min_top2_margin": round(float(margins.min()), 4),
                              "min_margin_step": int(margins.argmin()),
                              "seconds": round(seconds, 1)}, ensure_ascii=False), flush=True)
    finally:
        numpy.close()
    print(f"numpy greedy total {total:.1f} s; everything {time.time() - start:.1f} s")


def _decoder():
    """ids -> text from the GGUF's vocabulary (byte-level BPE), for reading the output."""
    import gguf

    reader = gguf.GGUFReader(GGUF)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_of = {chr(c): b for b, c in zip(bs, cs)}

    def decode(ids):
        return b"".join(bytes(byte_of[ch] for ch in tokens[i]) if all(ch in byte_of for ch in tokens[i])
                        else tokens[i].encode() for i in ids).decode("utf-8", errors="replace")
    return decode


if __name__ == "__main__":
    if "--reference-only" in sys.argv:
        reference_only()
    else:
        unittest.main()
