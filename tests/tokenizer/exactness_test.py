#!/usr/bin/env python3
"""Byte-level BPE exactness: Tessera's ids against the reference implementations.

- Llama 3: Meta's tiktoken tokenizer (llama-models) converted to tokenizer.json by
  scripts/llama3_tokenizer_json.py; ids must equal tiktoken's encode(x,
  disallowed_special=()) on every corpus line (special-token text stays ordinary text),
  and Hugging Face `tokenizers` on the converted file must agree too (checks the
  converter). decode(encode(x)) == x and the streaming deltas concatenate to x.
- Qwen2-style: a small ByteLevel BPE trained here with HF `tokenizers` and Qwen2's
  pre-tokenizer regex; ids must equal HF's, with special tokens parsed and not.
- The synthetic Llama 3 tokenizer of generated checkpoints loads in HF and gives its ids.

The corpus comes from scripts/tokenizer_corpus.py (seeded). Tessera is driven through
`tessera tokenize --input-file` once per tokenizer and mode.
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unicodedata
import unittest

try:  # Fail loudly: a skip would hide a broken setup (requirements-dev.txt).
    import tiktoken  # noqa: F401  (llama_models builds on it)
    from llama_models.llama3 import tokenizer as llama3_tokenizer
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
except ImportError as e:
    sys.exit(f"exactness_test: missing Python dependency ({e}); run scripts/setup.sh")

SOURCE = pathlib.Path(os.environ.get("TESSERA_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN = pathlib.Path(os.environ.get("TESSERA_BIN_DIR", SOURCE / "build" / "bin"))
WRITER = os.environ.get("TESSERA_SYNTHETIC_TOKENIZER_WRITER", "")
CORPUS_LINES = 2400
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def run(args, stdout=subprocess.PIPE):
    result = subprocess.run(args, stdout=stdout, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise AssertionError(f"{args[0]} failed ({result.returncode}):\n{result.stderr}")
    return result


def read_jsonl(path):
    with open(path, encoding="utf-8", newline="") as f:
        return [json.loads(line) for line in f]


class ExactnessTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="tessera-tokenizer-exactness-")
        tmp = pathlib.Path(cls.tmp.name)
        cls.tessera = BIN / "tessera"
        if not cls.tessera.exists():
            raise AssertionError(f"{cls.tessera} is missing: build the tessera target first")
        cls.corpus_path = tmp / "corpus.jsonl"
        run([sys.executable, str(SOURCE / "scripts/tokenizer_corpus.py"), "--out", str(cls.corpus_path),
             "--lines", str(CORPUS_LINES)])
        cls.corpus = read_jsonl(cls.corpus_path)
        cls.llama3_dir = tmp / "llama3"
        run([sys.executable, str(SOURCE / "scripts/llama3_tokenizer_json.py"), "--out", str(cls.llama3_dir)])
        model = pathlib.Path(llama3_tokenizer.__file__).parent / "tokenizer.model"
        cls.tiktoken = llama3_tokenizer.Tokenizer(model).model
        cls.tmp_path = tmp

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def tessera_encode(self, model_dir, *flags, corpus_path=None):
        out = self.tmp_path / "tessera_out.jsonl"
        with open(out, "w") as f:
            run([str(self.tessera), "tokenize", "--model", str(model_dir), "--input-file",
                 str(corpus_path or self.corpus_path), "--jsonl", *flags], stdout=f)
        return read_jsonl(out)

    def assert_same_ids(self, name, texts, expected, got):
        self.assertEqual(len(got), len(texts), f"{name}: tessera printed {len(got)} results for {len(texts)} lines")
        mismatches = [(i, t, e, g["ids"]) for i, (t, e, g) in enumerate(zip(texts, expected, got)) if e != g["ids"]]
        report = "\n".join(f"line {i}: {t!r}\n  reference: {e}\n  tessera:   {g}" for i, t, e, g in mismatches[:10])
        self.assertEqual(mismatches, [], f"{name}: {len(mismatches)} of {len(texts)} lines differ:\n{report}")

    def assert_round_trip(self, name, texts, got, normalize=lambda t: t):
        bad = [(i, t, g["decoded"]) for i, (t, g) in enumerate(zip(texts, got)) if g["decoded"] != normalize(t)]
        self.assertEqual(bad[:5], [], f"{name}: decode(encode(x)) != x on {len(bad)} lines")
        bad = [(i, t, g["deltas"]) for i, (t, g) in enumerate(zip(texts, got))
               if "".join(g["deltas"]) != normalize(t)]
        self.assertEqual(bad[:5], [], f"{name}: streamed deltas do not concatenate to x on {len(bad)} lines")
        for i, g in enumerate(got):
            for delta in g["deltas"]:
                # The CLI writes bytes that are not UTF-8 as U+FFFD; none may appear.
                self.assertNotIn("\ufffd", delta, f"{name}: line {i}: a streamed delta is not valid UTF-8")

    def test_corpus_is_large_and_varied(self):
        self.assertGreaterEqual(len(self.corpus), 2000)
        joined = "".join(self.corpus)
        for needle in ["\r\n", "\t", "\u200d", "\u0085", "<|eot_id|>", "'S", "'LL", "中", "ё", "ع", "न", "ส",
                       "\U0001f3fd", "\u0301"]:
            self.assertTrue(needle in joined, f"corpus lacks {needle!r}")

    def test_llama3_ids_equal_tiktoken(self):
        got = self.tessera_encode(self.llama3_dir, "--plain-special-tokens", "--stream")
        expected = [self.tiktoken.encode(t, disallowed_special=()) for t in self.corpus]
        self.assert_same_ids("llama3 vs tiktoken", self.corpus, expected, got)
        self.assert_round_trip("llama3", self.corpus, got)
        # The special-token text really was in the corpus and stayed ordinary text.
        self.assertTrue(any("<|eot_id|>" in t for t in self.corpus))
        self.assertFalse(any(i >= 128000 for g in got for i in g["ids"]))

    def test_llama3_converted_file_agrees_with_hugging_face(self):
        hf = Tokenizer.from_file(str(self.llama3_dir / "tokenizer.json"))
        hf.encode_special_tokens = True
        plain = [hf.encode(t, add_special_tokens=False).ids for t in self.corpus]
        expected = [self.tiktoken.encode(t, disallowed_special=()) for t in self.corpus]
        bad = [i for i, (a, b) in enumerate(zip(plain, expected)) if a != b]
        self.assertEqual(bad[:10], [], "the converted tokenizer.json disagrees with tiktoken in HF tokenizers")
        # Special tokens parsed (the default on both sides), and BOS added.
        hf.encode_special_tokens = False
        expected = [hf.encode(t, add_special_tokens=True).ids for t in self.corpus]
        got = self.tessera_encode(self.llama3_dir, "--add-special-tokens")
        self.assert_same_ids("llama3 vs HF (specials parsed, BOS)", self.corpus, expected, got)
        self.assertTrue(all(g["ids"][0] == 128000 for g in got))
        self.assertTrue(any(128009 in g["ids"] for g in got), "no <|eot_id|> text became the special token")

    def test_tokenize_command_single_text(self):
        text = "Hello world, it's <|eot_id|> 12345 🤖"
        hf = Tokenizer.from_file(str(self.llama3_dir / "tokenizer.json"))
        self.assertEqual(sorted(os.listdir(self.llama3_dir)), ["tokenizer.json", "tokenizer_config.json"])
        for flags, bos in (([], []), (["--add-special-tokens"], [128000])):
            out = json.loads(run([str(self.tessera), "tokenize", "--model", str(self.llama3_dir), "--text", text,
                                  "--json", *flags]).stdout)
            self.assertEqual(sorted(out), ["ids", "tokens"])
            expected = bos + self.tiktoken.encode(text, allowed_special="all")
            self.assertEqual(out["ids"], expected)
            self.assertEqual(out["tokens"], [hf.id_to_token(i) for i in expected])
        plain = run([str(self.tessera), "tokenize", "--model", str(self.llama3_dir), "--text", text,
                     "--plain-special-tokens"]).stdout.split()
        self.assertEqual([int(i) for i in plain], self.tiktoken.encode(text, disallowed_special=()))

    def train_qwen2_style(self):
        training = self.tmp_path / "training.jsonl"
        run([sys.executable, str(SOURCE / "scripts/tokenizer_corpus.py"), "--out", str(training),
             "--lines", "4000", "--seed", "7"])
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFC()  # As Qwen2's own tokenizer.json.
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        trainer = trainers.BpeTrainer(vocab_size=3000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator(read_jsonl(training), trainer)
        tok.add_special_tokens(QWEN2_SPECIALS)
        out = self.tmp_path / "qwen2"
        out.mkdir(exist_ok=True)
        tok.save(str(out / "tokenizer.json"))
        (out / "tokenizer_config.json").write_text(json.dumps(
            {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}))
        return out, Tokenizer.from_file(str(out / "tokenizer.json"))

    def test_qwen2_style_ids_equal_hugging_face(self):
        model_dir, hf = self.train_qwen2_style()
        self.assertGreater(hf.get_vocab_size(), 2900)
        for plain in (False, True):
            hf.encode_special_tokens = plain
            expected = [hf.encode(t, add_special_tokens=True).ids for t in self.corpus]
            flags = ["--add-special-tokens", "--stream"] + (["--plain-special-tokens"] if plain else [])
            got = self.tessera_encode(model_dir, *flags)
            self.assert_same_ids(f"qwen2-style vs HF (plain specials: {plain})", self.corpus, expected, got)
            if plain:
                nfc = lambda t: unicodedata.normalize("NFC", t)
                self.assert_round_trip("qwen2-style (NFC)", self.corpus, got, normalize=nfc)
            else:
                specials = {hf.token_to_id(s) for s in QWEN2_SPECIALS}
                self.assertTrue(any(specials & set(g["ids"]) for g in got))

    def check_synthetic(self, flavor, regular, total):
        self.assertTrue(WRITER and os.path.exists(WRITER),
                        f"TESSERA_SYNTHETIC_TOKENIZER_WRITER={WRITER!r} is not the write_synthetic_tokenizer binary")
        out = self.tmp_path / f"synthetic_{flavor}"
        run([WRITER, "--flavor", flavor, "--num-regular-tokens", str(regular), "--out", str(out)])
        hf = Tokenizer.from_file(str(out / "tokenizer.json"))
        self.assertEqual(hf.get_vocab_size(), total)
        texts = self.corpus[:400]
        subset = self.tmp_path / "subset.jsonl"
        subset.write_text("".join(json.dumps(t) + "\n" for t in texts))
        expected = [hf.encode(t, add_special_tokens=True).ids for t in texts]
        got = self.tessera_encode(out, "--add-special-tokens", corpus_path=subset)
        self.assert_same_ids(f"synthetic {flavor} vs HF", texts, expected, got)
        # Common words are single tokens, so generated models see word-sized ids.
        self.assertEqual(len(hf.encode(" the", add_special_tokens=False).ids), 1)

    def test_synthetic_llama3_tokenizer_matches_hugging_face(self):
        self.check_synthetic("llama3", 128000, 128256)

    def test_synthetic_qwen2_tokenizer_matches_hugging_face(self):
        self.check_synthetic("qwen2", 151643, 151665)


if __name__ == "__main__":
    unittest.main()
