#!/usr/bin/env python3
"""`tessera convert-gguf` and `tessera run --model FILE.gguf` on a tiny random GGUF file.

make_tiny_gguf.py writes a 2-layer llama whose tensors use every block type Tessera
reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K), an untied output, and a GPT-2
byte-level tokenizer with ChatML control tokens. Against oracles that share nothing with
Tessera's C++:

- model.safetensors: every tensor equals llama.cpp's gguf-py dequantization of the file
  (gguf.quants.dequantize), with llama.cpp's q/k row interleave undone here, under its
  Hugging Face name (exact, or within 1e-6 of the tensor's largest magnitude); --dtype
  bf16 / f16 give those dtypes, rounded to nearest-even from the float32 values;
- config.json and tokenizer_config.json carry the file's hyperparameters, chat template and
  eos token; tokenizer.json loads in Hugging Face `tokenizers` and encodes texts to the
  ids `tessera tokenize` gives (on the folder and on the .gguf);
- `tessera run --model tiny.gguf` (Q8_0 served as int8 and Q4_0/Q4_1/Q4_K as int4 with the
  file's codes) and `tessera run` on the converted folder generate numpy_llama.py's greedy
  ids on the converted float32 folder. A divergence is accepted only at a step where
  numpy's own top two logits are within NEAR_TIE (float32 against float64); with the
  default seed the closest step is 0.023 apart (0.047 for the short prompt);
- refusals: a copy cut in the middle of the tensor data (the message names a tensor that
  runs past the end), a Q5_K tensor (named, with its type), and files that are not GGUF.

Environment: TESSERA_BIN (default build/bin/tessera under the source root; also
`--tessera-bin PATH` on the command line). Needs numpy, gguf==0.19.0 and
tokenizers==0.23.3 (requirements-dev.txt). About 5 s.

  TESSERA_BIN=build/bin/tessera python3 tests/tools/gguf_convert_test.py -v
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SOURCE, "tests", "reference"))

import gguf_to_hf  # noqa: E402
import make_tiny_gguf  # noqa: E402

TESSERA = os.environ.get("TESSERA_BIN", os.path.join(SOURCE, "build", "bin", "tessera"))
SEED = 0
PROMPT_IDS = [1, 2, 3]
MAX_NEW_TOKENS = 8
# A longer one (control tokens, merged pieces, bytes) that takes RoPE to position 31.
LONG_PROMPT_IDS = [266, 258, 97, 116, 261, 32, 105, 115, 32, 262, 44, 258, 264, 265, 10, 266]
LONG_NEW_TOKENS = 16
NEAR_TIE = 0.02
# Types that `tessera run` must serve with the file's codes (its "weights" log line).
NATIVE_TYPES = ("Q4_0", "Q4_1", "Q4_K", "Q8_0")

# The names and the q/k interleave come from the Python oracle of the SmolLM2 test, written
# independently of the C++ reader.
hf_name = gguf_to_hf.hf_name
unpermute = gguf_to_hf.unpermute_rows

TEXTS = [
    "the theater is on",
    " the then, in a  snow were answer",
    "Hello wörld, naïve café 🙂 日本 123 4567",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "line\n\n  \ttabbed   spaces\r\nend ",
    "don't stop; it's 3.14!",
    "",
]


def read_safetensors(path):
    """{name: (dtype string, array in that dtype's numpy form: BF16 as uint16 bits)}."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    numpy_of = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=numpy_of[info["dtype"]]).reshape(info["shape"])
        out[name] = (info["dtype"], array)
    return out


def bf16_bits(f32):
    """float32 -> bfloat16 bits, rounded to nearest even (no NaNs here)."""
    bits = np.ascontiguousarray(f32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def expected_tensors(gguf_path):
    """{Hugging Face name: (GGUF type name, float32 array)} by gguf-py, q/k un-permuted."""
    import gguf
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(gguf_path)
    heads = int(reader.fields["llama.attention.head_count"].contents())
    kv_heads = int(reader.fields["llama.attention.head_count_kv"].contents())
    out = {}
    for t in reader.tensors:
        shape = tuple(int(n) for n in reversed(t.shape))
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        if t.name.endswith("attn_q.weight"):
            w = unpermute(w, heads)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute(w, kv_heads)
        out[hf_name(t.name)] = (t.tensor_type.name, np.ascontiguousarray(w))
    return out


def tessera(*args, env=None, timeout=60):
    return subprocess.run([TESSERA, *args], capture_output=True, text=True, env=env, timeout=timeout)


class GgufConvertTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(TESSERA, os.X_OK):
            raise AssertionError(f"{TESSERA} is missing: build the tessera target or set TESSERA_BIN")
        cls.tmp = tempfile.mkdtemp(prefix="gguf_convert_test.")
        cls.env = dict(os.environ, TESSERA_CACHE_DIR=os.path.join(cls.tmp, "cache"))
        cls.gguf = os.path.join(cls.tmp, "tiny.gguf")
        cls.types = make_tiny_gguf.write_tiny_gguf(cls.gguf, seed=SEED)
        cls.expected = expected_tensors(cls.gguf)
        cls.dirs = {}
        for dtype in ("f32", "bf16", "f16"):
            out = os.path.join(cls.tmp, f"hf_{dtype}")
            r = tessera("convert-gguf", cls.gguf, "--out", out, "--dtype", dtype, env=cls.env)
            if r.returncode != 0:
                raise AssertionError(f"convert-gguf --dtype {dtype} failed ({r.returncode}):\n{r.stderr}")
            cls.dirs[dtype] = out

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def load_json(self, dtype, name):
        with open(os.path.join(self.dirs[dtype], name)) as f:
            return json.load(f)

    # --- the file itself --------------------------------------------------------------

    def test_file_uses_every_supported_type(self):
        self.assertEqual(set(self.types.values()),
                         {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"})
        self.assertEqual(self.types["token_embd.weight"], "Q8_0")
        self.assertIn("output.weight", self.types)

    # --- model.safetensors ------------------------------------------------------------

    def test_f32_tensors_equal_gguf_py_dequantization(self):
        got = read_safetensors(os.path.join(self.dirs["f32"], "model.safetensors"))
        self.assertEqual(sorted(got), sorted(self.expected))
        inexact = []
        for name, (gtype, want) in self.expected.items():
            dtype, array = got[name]
            with self.subTest(tensor=name, gguf_type=gtype):
                self.assertEqual(dtype, "F32")
                self.assertEqual(array.shape, want.shape)
                if not np.array_equal(array, want):
                    worst = float(np.max(np.abs(array.astype(np.float64) - want)))
                    scale = float(np.max(np.abs(want)))
                    inexact.append(f"{name} ({gtype}): max |diff| {worst:.3g} of max |w| {scale:.3g}")
                    self.assertLessEqual(worst, 1e-6 * scale, inexact[-1])
        if inexact:
            print("\nnot bit-exact (within 1e-6):\n  " + "\n  ".join(inexact), file=sys.stderr)

    def test_qk_unpermutation_is_visible(self):
        # The check above would pass for a converter that forgot the interleave only if
        # un-permuting changed nothing: make sure it does for every q and k here.
        import gguf
        reader = gguf.GGUFReader(self.gguf)
        for t in reader.tensors:
            if t.name.endswith(("attn_q.weight", "attn_k.weight")):
                raw = gguf.quants.dequantize(t.data, t.tensor_type).reshape(
                    tuple(int(n) for n in reversed(t.shape)))
                self.assertFalse(np.array_equal(raw, self.expected[hf_name(t.name)][1]), t.name)

    def test_bf16_and_f16_outputs_round_the_f32_values(self):
        f32 = read_safetensors(os.path.join(self.dirs["f32"], "model.safetensors"))
        for dtype, st_dtype in (("bf16", "BF16"), ("f16", "F16")):
            got = read_safetensors(os.path.join(self.dirs[dtype], "model.safetensors"))
            self.assertEqual(sorted(got), sorted(f32))
            self.assertEqual(self.load_json(dtype, "config.json")["torch_dtype"],
                             {"bf16": "bfloat16", "f16": "float16"}[dtype])
            for name, (_, want32) in f32.items():
                with self.subTest(dtype=dtype, tensor=name):
                    got_dtype, array = got[name]
                    self.assertEqual(got_dtype, st_dtype)
                    want = bf16_bits(want32) if dtype == "bf16" else want32.astype(np.float16)
                    mismatched = int(np.count_nonzero(array.view(np.uint16) != want.view(np.uint16)))
                    self.assertEqual(mismatched, 0, f"{mismatched} of {array.size} elements differ "
                                     f"from round-to-nearest-even of the F32 output")

    # --- config.json / tokenizer ------------------------------------------------------

    def test_config(self):
        c = self.load_json("f32", "config.json")
        self.assertEqual(c["architectures"], ["LlamaForCausalLM"])
        self.assertEqual(c["hidden_size"], 256)
        self.assertEqual(c["intermediate_size"], 512)
        self.assertEqual(c["num_hidden_layers"], 2)
        self.assertEqual(c["num_attention_heads"], 4)
        self.assertEqual(c["num_key_value_heads"], 2)
        self.assertEqual(c["head_dim"], 64)
        self.assertEqual(c["max_position_embeddings"], 256)
        tokens, _, _ = make_tiny_gguf.vocabulary()
        self.assertEqual(c["vocab_size"], len(tokens))
        self.assertIs(c["tie_word_embeddings"], False)
        self.assertEqual(c["rope_theta"], 10000.0)
        self.assertAlmostEqual(c["rms_norm_eps"], 1e-5, delta=1e-12)  # GGUF stores a float32.
        self.assertEqual(c["eos_token_id"], tokens.index("<|im_end|>"))
        self.assertEqual(c["torch_dtype"], "float32")

    def test_tokenizer_config(self):
        tc = self.load_json("f32", "tokenizer_config.json")
        self.assertEqual(tc["chat_template"], make_tiny_gguf.CHAT_TEMPLATE)
        self.assertEqual(tc["eos_token"], "<|im_end|>")
        self.assertIs(tc["add_bos_token"], False)
        self.assertIsNone(tc.get("bos_token"))

    def test_tokenizer_matches_hugging_face_tokenizers(self):
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(os.path.join(self.dirs["f32"], "tokenizer.json"))
        tokens, _, _ = make_tiny_gguf.vocabulary()
        self.assertEqual(tok.get_vocab_size(with_added_tokens=True), len(tokens))
        # The merges are applied: " the" is one token, "<|im_end|>" is the control token.
        self.assertEqual(tok.encode(" the", add_special_tokens=False).ids, [tokens.index("Ġthe")])
        self.assertEqual(tok.encode("<|im_end|>", add_special_tokens=False).ids,
                         [tokens.index("<|im_end|>")])
        texts_file = os.path.join(self.tmp, "texts.jsonl")
        with open(texts_file, "w") as f:
            for text in TEXTS:
                f.write(json.dumps(text) + "\n")
        for model in (self.dirs["f32"], self.gguf):
            r = tessera("tokenize", "--model", model, "--input-file", texts_file, "--jsonl", env=self.env)
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
            self.assertEqual(len(lines), len(TEXTS))
            for text, line in zip(TEXTS, lines):
                with self.subTest(model=os.path.basename(model), text=text):
                    want = tok.encode(text, add_special_tokens=False).ids
                    self.assertEqual(line["ids"], want)
                    self.assertEqual(line["decoded"], text)
                    self.assertEqual(tok.decode(want, skip_special_tokens=False), text)
        # No BOS is added (add_bos_token false), with or without --add-special-tokens.
        r = tessera("tokenize", "--model", self.dirs["f32"], "--text", TEXTS[0], "--json",
                    "--add-special-tokens", env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["ids"], tok.encode(TEXTS[0]).ids)

    # --- tessera run against numpy ------------------------------------------------------

    def numpy_greedy(self, prompt, n):
        import numpy_llama

        if not hasattr(self, "_numpy_model"):
            type(self)._numpy_model = numpy_llama.Model(self.dirs["f32"])
        return self._numpy_model.greedy(prompt, n)

    def run_tessera(self, model, prompt, n):
        r = tessera("run", "--model", model, "--prompt-ids", ",".join(map(str, prompt)),
                    "--max-tokens", str(n), "--temperature", "0", "--ignore-eos",
                    "--json", "--quiet", env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        result = json.loads(r.stdout)
        self.assertEqual(result["prompt_ids"], prompt)
        return result, r.stderr

    def assert_same_greedy(self, ours, numpy_ids, logits, what):
        margins = [float(np.sort(step)[-1] - np.sort(step)[-2]) for step in logits]
        for i, (a, b) in enumerate(zip(ours, numpy_ids)):
            if a == b:
                continue
            gap = float(logits[i][b] - logits[i][a])
            detail = (f"{what}: step {i}: tessera chose {a}, numpy {b} (numpy's logit of its "
                      f"choice exceeds tessera's by {gap:.4g}; top-2 margins per step "
                      f"{[round(m, 4) for m in margins]}); tessera {ours}, numpy {numpy_ids}")
            self.assertLess(gap, NEAR_TIE, detail)
            print(f"\naccepted near tie: {detail}", file=sys.stderr)
            return
        self.assertEqual(len(ours), len(numpy_ids), what)

    def test_run_gguf_and_converted_folder_match_numpy(self):
        for prompt, n in ((PROMPT_IDS, MAX_NEW_TOKENS), (LONG_PROMPT_IDS, LONG_NEW_TOKENS)):
            numpy_ids, logits = self.numpy_greedy(prompt, n)
            print(f"\nprompt {prompt}: numpy greedy ids {numpy_ids}; smallest top-2 logit margin "
                  f"{min(float(np.sort(s)[-1] - np.sort(s)[-2]) for s in logits):.4g}", file=sys.stderr)
            with self.subTest(prompt=prompt, model="tiny.gguf"):
                result, log = self.run_tessera(self.gguf, prompt, n)
                self.assert_same_greedy(result["generated_ids"], numpy_ids, logits, "run --model tiny.gguf")
                # The GGUF path really served the 4- and 8-bit types with the file's codes.
                native = [line for line in log.splitlines() if "served with the file's codes" in line]
                self.assertEqual(len(native), 1, log)
                for t in NATIVE_TYPES:
                    self.assertRegex(native[0].split(";")[0], rf"\b{t}\b", native[0])
            with self.subTest(prompt=prompt, model="converted F32 folder"):
                result, _ = self.run_tessera(self.dirs["f32"], prompt, n)
                self.assert_same_greedy(result["generated_ids"], numpy_ids, logits, "run on the F32 folder")

    # --- refusals -----------------------------------------------------------------------

    def assert_refused(self, r, *needles):
        self.assertGreater(r.returncode, 0, f"exit {r.returncode} (a signal is a crash):\n{r.stderr}")
        for needle in needles:
            self.assertIn(needle, r.stderr)

    def test_truncated_file_is_refused(self):
        import gguf
        reader = gguf.GGUFReader(self.gguf)
        begin = min(int(t.data_offset) for t in reader.tensors)
        end = os.path.getsize(self.gguf)
        cut = (begin + end) // 2
        past = [t.name for t in reader.tensors if int(t.data_offset) + int(t.n_bytes) > cut]
        self.assertTrue(past)
        # The cut falls inside a tensor, not on a boundary.
        self.assertTrue(any(int(t.data_offset) < cut < int(t.data_offset) + int(t.n_bytes)
                            for t in reader.tensors))
        truncated = os.path.join(self.tmp, "truncated.gguf")
        with open(self.gguf, "rb") as src, open(truncated, "wb") as dst:
            dst.write(src.read(cut))
        out = os.path.join(self.tmp, "hf_truncated")
        for r in (tessera("convert-gguf", truncated, "--out", out, env=self.env),
                  tessera("run", "--model", truncated, "--prompt-ids", "1", "--max-tokens", "1",
                          "--quiet", env=self.env)):
            self.assert_refused(r)
            self.assertTrue(any(f'"{name}"' in r.stderr for name in past),
                            f"no tensor past the cut ({past}) named in:\n{r.stderr}")
            self.assertTrue("truncated" in r.stderr or "past the end" in r.stderr, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "model.safetensors")))

    def test_unsupported_type_is_refused(self):
        path = os.path.join(self.tmp, "q5_k.gguf")
        make_tiny_gguf.write_tiny_gguf(path, seed=SEED, type_overrides={"blk.1.ffn_up.weight": "Q5_K"})
        out = os.path.join(self.tmp, "hf_q5_k")
        r = tessera("convert-gguf", path, "--out", out, env=self.env)
        self.assert_refused(r, "blk.1.ffn_up.weight", "Q5_K")
        self.assertFalse(os.path.exists(out), "a refused conversion writes nothing")
        r = tessera("run", "--model", path, "--prompt-ids", "1", "--max-tokens", "1", "--quiet",
                    env=self.env)
        self.assert_refused(r, "Q5_K")
        self.assertIn(path, r.stderr, "the error names the user's file, not the cache's link to it")

    def test_non_gguf_files_are_refused(self):
        cases = {
            "text.gguf": b"this is not a GGUF file\n",
            "empty.gguf": b"",
            "magic_only.gguf": b"GGUF",
            "bad_version.gguf": b"GGUF" + struct.pack("<I", 99) + bytes(16),
            "safetensors.gguf": struct.pack("<Q", 2) + b"{}",
        }
        for name, content in cases.items():
            path = os.path.join(self.tmp, name)
            with open(path, "wb") as f:
                f.write(content)
            with self.subTest(file=name):
                r = tessera("convert-gguf", path, "--out", os.path.join(self.tmp, "hf_" + name), env=self.env)
                self.assert_refused(r)
                self.assertIn(name, r.stderr)
                # Served, the file is not mistaken for a folder.
                r = tessera("run", "--model", path, "--prompt-ids", "1", "--max-tokens", "1", "--quiet",
                            env=self.env)
                self.assert_refused(r, name)
                self.assertNotIn("tokenizer.json", r.stderr)
        r = tessera("convert-gguf", os.path.join(self.tmp, "missing.gguf"), "--out",
                    os.path.join(self.tmp, "hf_missing"), env=self.env)
        self.assert_refused(r, "missing.gguf")


if __name__ == "__main__":
    if "--tessera-bin" in sys.argv:
        i = sys.argv.index("--tessera-bin")
        TESSERA = sys.argv[i + 1]
        del sys.argv[i:i + 2]
    unittest.main()
