#!/usr/bin/env python3
"""Converts Meta's Llama 3 tiktoken tokenizer to a Hugging Face tokenizer.json.

The source is the `tokenizer.model` that the PyPI package llama-models ships
(llama_models/llama3/tokenizer.model: base64 token bytes and their rank, 128,000 lines);
the 256 special tokens, their ids and the pre-tokenizer regex come from the same package's
llama_models/llama3/tokenizer.py. Writes into --out:

  tokenizer.json         BPE over the GPT-2 byte alphabet, merges derived from the ranks,
                         Split(Llama 3 regex, Isolated) + ByteLevel(use_regex=false),
                         ByteLevel decoder, ignore_merges, <|begin_of_text|> prepended.
  tokenizer_config.json  bos <|begin_of_text|>, eos <|eot_id|> (as the instruct models).

Merges are derived the standard way (as transformers' TikTokenConverter does): for every
token, each split into two pieces that are both tokens of lower rank is a merge; merges
are ordered by the rank of the token they make, then by the ranks of their two pieces.
BPE over these merges with ignore_merges reproduces tiktoken's rank-ordered merging.
"""
import argparse
import base64
import json
import os
import pathlib
import sys


def byte_to_unicode():
    """GPT-2's table: printable Latin-1 bytes stand for themselves, the rest for U+0100..."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table = {}
    shifted = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
            except ValueError as e:
                raise SystemExit(f"{path}:{number}: not '<base64> <rank>': {e}")
    return ranks


def derive_merges(ranks):
    merges = []
    for token, rank in ranks.items():
        if len(token) == 1:
            continue
        local = []
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            left_rank, right_rank = ranks.get(left), ranks.get(right)
            if left_rank is not None and right_rank is not None and left_rank < rank and right_rank < rank:
                local.append((left_rank, right_rank, left, right))
        local.sort()
        merges.extend((rank, left, right) for _, _, left, right in local)
    merges.sort(key=lambda m: m[0])  # Stable: within a token, the order above.
    return [(left, right) for _, left, right in merges]


def convert(model_path, special_tokens, pattern):
    table = byte_to_unicode()
    spell = lambda b: "".join(table[x] for x in b)
    ranks = load_ranks(model_path)
    vocab = {spell(token): rank for token, rank in ranks.items()}
    if len(vocab) != len(ranks):
        raise SystemExit(f"{model_path}: two tokens spell the same piece")
    merges = [[spell(left), spell(right)] for left, right in derive_merges(ranks)]
    bos = "<|begin_of_text|>"
    bos_id = special_tokens[bos]
    added = [
        {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for content, i in sorted(special_tokens.items(), key=lambda kv: kv[1])
    ]
    bos_item = {"SpecialToken": {"id": bos, "type_id": 0}}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": {
            "type": "Sequence",
            "processors": [
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
                {
                    "type": "TemplateProcessing",
                    "single": [bos_item, {"Sequence": {"id": "A", "type_id": 0}}],
                    "pair": [bos_item, {"Sequence": {"id": "A", "type_id": 0}}, bos_item,
                             {"Sequence": {"id": "B", "type_id": 1}}],
                    "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
                },
            ],
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": vocab,
            "merges": merges,
        },
    }
    config = {
        "bos_token": bos,
        "eos_token": "<|eot_id|>",
        "clean_up_tokenization_spaces": True,
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    return tokenizer, config


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder to write (created if missing)")
    parser.add_argument("--model", help="tokenizer.model to convert (default: the one in llama-models)")
    args = parser.parse_args()
    try:
        from llama_models.llama3 import tokenizer as llama3_tokenizer
    except ImportError as e:
        raise SystemExit(f"llama-models is missing ({e}); run scripts/setup.sh (requirements-dev.txt)")
    model = args.model or os.path.join(os.path.dirname(llama3_tokenizer.__file__), "tokenizer.model")
    reference = llama3_tokenizer.Tokenizer(pathlib.Path(model))
    tokenizer, config = convert(model, reference.special_tokens, reference.pat_str)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    print(f"wrote {args.out}/tokenizer.json: {len(tokenizer['model']['vocab'])} pieces, "
          f"{len(tokenizer['model']['merges'])} merges, {len(tokenizer['added_tokens'])} specials",
          file=sys.stderr)


if __name__ == "__main__":
    main()
