#!/usr/bin/env python3
"""Token ids of texts and chat prompts for a GGUF file, from Hugging Face transformers.

The oracle for Tessera's GGUF tokenizer. A GGUF file carries its tokenizer as metadata
(tokenizer.ggml.tokens / merges / token_type, the special ids, tokenizer.chat_template);
transformers rebuilds a `tokenizers` tokenizer from that (integrations/gguf/
gguf_tokenizer_mapping.py) and renders the chat template with jinja2 as it does for any
model. This prints, as JSON, the ids of each text (encode(text), special-token text such as
"<|im_start|>" parsed, BOS only where the file's add_bos_token asks) and of each chat
(apply_chat_template(messages, add_generation_prompt=True) rendered, then encoded without
added special tokens, which is what apply_chat_template(tokenize=True) does).

Two departures from `AutoTokenizer.from_pretrained(dir, gguf_file=...)`, both checked by
scripts/reference/check_gguf_reference.py:
- No torch. transformers 5.25 reads GGUF metadata with integrations/gguf/reader.py, which
  imports torch at the top, and AutoTokenizer builds a model config through
  load_gguf_checkpoint, which refuses to run without torch. Here the metadata comes from
  llama.cpp's gguf-py instead (same keys and values, see `_read_gguf_metadata`), and the
  tokenizer is built by TokenizersBackend.from_pretrained(dir, gguf_file=...), the class
  AutoTokenizer picks for these files. The check script shows the ids are identical.
- The pre-tokenizer of `tokenizer.ggml.pre = smollm` (SmolLM, SmolLM2). transformers 5.25
  knows no "smollm" and falls back to GPT-2's regex. llama.cpp (llama-vocab.cpp,
  LLAMA_VOCAB_PRE_TYPE_SMOLLM, grouped with STARCODER) first splits every digit apart
  ("\\p{N}") and then applies GPT-2's regex, as the models' own tokenizer.json does with
  Sequence[Digits(individual_digits), ByteLevel]. The two differ on whitespace before a
  digit: "a  1" is [a, "  ", 1] for llama.cpp and [a, " ", " ", 1] for stock transformers.
  This script uses llama.cpp's rule unless --stock-pre-tokenizer.

Usage:
  gguf_tokenizer_reference.py --gguf FILE.gguf [--text TEXT]... [--chat JSON]...
      [--request FILE.json] [--stock-pre-tokenizer] [--out FILE.json]
--chat takes a JSON list of {"role", "content"} messages; --request a JSON object
{"texts": [...], "chats": [[messages], ...]}. Without --out the JSON goes to stdout.

Needs (no torch): transformers==5.25.0 tokenizers==0.23.3 gguf==0.19.0 numpy==2.4.6
jinja2==3.1.6. Loading SmolLM2's 49152-token vocabulary takes about 3 s.
"""

import argparse
import contextlib
import json
import os
import platform
import sys
import types

# GGUF `tokenizer.ggml.pre` values whose pre-tokenizer transformers gets wrong, and the
# `tokenizers` pre-tokenizer llama.cpp's regexes amount to.
FIXED_PRE_TOKENIZERS = ("smollm",)


def fixed_pre_tokenizer(pre):
    """The pre-tokenizer for `pre` from FIXED_PRE_TOKENIZERS (None for any other value)."""
    from tokenizers import pre_tokenizers

    if pre == "smollm":
        return pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ])
    return None


def _read_gguf_metadata(gguf_path, string_arrays=()):
    """transformers.integrations.gguf.reader.read_gguf_metadata without torch, via gguf-py:
    ({key: value}, tensor names), string arrays as their length unless named in
    `string_arrays`, numeric arrays as lists."""
    import gguf

    reader = gguf.GGUFReader(gguf_path)
    metadata = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):  # gguf-py's header pseudo-fields, not metadata.
            continue
        if field.types and field.types[0] == gguf.GGUFValueType.ARRAY:
            if field.types[1] == gguf.GGUFValueType.STRING and key not in string_arrays:
                metadata[key] = len(field.data)
            else:
                metadata[key] = list(field.contents())
        else:
            metadata[key] = field.contents()
    return metadata, tuple(t.name for t in reader.tensors)


@contextlib.contextmanager
def _torch_free_reader():
    """Stands in for transformers' torch-importing GGUF reader module while loading."""
    name = "transformers.integrations.gguf.reader"
    shim = types.ModuleType(name)
    shim.read_gguf_metadata = _read_gguf_metadata
    previous = sys.modules.get(name)
    sys.modules[name] = shim
    try:
        yield
    finally:
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous


def load(gguf_path, stock_pre_tokenizer=False):
    """(transformers tokenizer, notes dict) for the tokenizer `gguf_path` describes."""
    import gguf
    from transformers import TokenizersBackend

    gguf_path = os.path.abspath(gguf_path)
    with _torch_free_reader():
        tokenizer = TokenizersBackend.from_pretrained(os.path.dirname(gguf_path),
                                                      gguf_file=os.path.basename(gguf_path))
    reader = gguf.GGUFReader(gguf_path)

    def value(key):
        field = reader.fields.get(key)
        return None if field is None else field.contents()

    pre = value("tokenizer.ggml.pre")
    notes = {
        "tokenizer_model": value("tokenizer.ggml.model"),
        "tokenizer_pre": pre,
        "add_bos_token_in_file": value("tokenizer.ggml.add_bos_token"),
        "add_bos_token": bool(getattr(tokenizer, "add_bos_token", False)),
        "bos_id": tokenizer.bos_token_id,
        "eos_id": tokenizer.eos_token_id,
        "pre_tokenizer": "transformers (stock)",
    }
    fix = None if stock_pre_tokenizer else fixed_pre_tokenizer(pre)
    if fix is not None:
        tokenizer.backend_tokenizer.pre_tokenizer = fix
        notes["pre_tokenizer"] = f"llama.cpp's rule for pre={pre!r}: {fix!r}"
    return tokenizer, notes


def encode_text(tokenizer, text):
    """Ids of `text` as a prompt: special-token text parsed, BOS as the file says."""
    return tokenizer.encode(text, add_special_tokens=True)


def encode_chat(tokenizer, messages):
    """(rendered prompt, ids) of `messages` through the file's chat template."""
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return rendered, tokenizer.encode(rendered, add_special_tokens=False)


def reference(gguf_path, texts=(), chats=(), stock_pre_tokenizer=False):
    """The JSON-ready record this script prints."""
    import tokenizers
    import transformers

    tokenizer, notes = load(gguf_path, stock_pre_tokenizer)
    record = {
        "what": "token ids from Hugging Face transformers' GGUF tokenizer "
                "(tests/reference/gguf_tokenizer_reference.py)",
        "gguf": os.path.abspath(gguf_path),
        "versions": {"python": platform.python_version(),
                     "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__},
        **notes,
        "texts": [{"text": t, "ids": encode_text(tokenizer, t)} for t in texts],
        "chats": [],
    }
    for messages in chats:
        rendered, ids = encode_chat(tokenizer, messages)
        record["chats"].append({"messages": messages, "rendered": rendered, "ids": ids})
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--text", action="append", default=[], help="a prompt text (repeatable)")
    parser.add_argument("--chat", action="append", default=[],
                        help='JSON list of messages, e.g. \'[{"role": "user", "content": "Hi"}]\'')
    parser.add_argument("--request", help='JSON file {"texts": [...], "chats": [[...], ...]}')
    parser.add_argument("--stock-pre-tokenizer", action="store_true",
                        help="keep transformers' own pre-tokenizer even where it is wrong")
    parser.add_argument("--out", help="JSON file to write (default: stdout)")
    args = parser.parse_args(argv)
    texts = list(args.text)
    chats = [json.loads(c) for c in args.chat]
    if args.request:
        with open(args.request, encoding="utf-8") as f:
            request = json.load(f)
        texts += request.get("texts", [])
        chats += request.get("chats", [])
    record = reference(args.gguf, texts, chats, args.stock_pre_tokenizer)
    text = json.dumps(record, ensure_ascii=False, indent=1)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
