#!/usr/bin/env python3
"""Regenerates stories260K's expected_once_upon_a_time.json from the repository.

The shared file was first made with llama2.c's run.c on stories260K.bin. This script makes
the same record from the Hugging Face files beside it (config.json, model.safetensors,
tokenizer.json) with tests/reference/numpy_llama.py: the prompt encoded by the
tokenizer.json BPE (SentencePiece style: "▁" for spaces, byte fallback, BOS added as
tokenizer_config.json asks), 60 greedy steps, the first position's logits and top 5, and
the decoded text.

Usage: stories260k_reference.py [--model DIR] [--out FILE]   (default: print to stdout)
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "reference"))
from numpy_llama import Model  # noqa: E402

PROMPT = "Once upon a time"
STEPS = 60
SPACE = "\u2581"


class SentencePieceBpe:
    """The subset of a SentencePiece-style BPE tokenizer.json that stories260K uses."""

    def __init__(self, path):
        with open(path) as f:
            j = json.load(f)
        model = j["model"]
        self.vocab = model["vocab"]
        self.pieces = {i: p for p, i in self.vocab.items()}
        self.ranks = {}
        for rank, merge in enumerate(model["merges"]):
            pair = tuple(merge.split(" ", 1)) if isinstance(merge, str) else tuple(merge)
            self.ranks[pair] = rank

    def encode(self, text):
        symbols = list(SPACE + text.replace(" ", SPACE))
        while len(symbols) > 1:
            best = min(range(len(symbols) - 1),
                       key=lambda i: self.ranks.get((symbols[i], symbols[i + 1]), 1 << 60))
            if (symbols[best], symbols[best + 1]) not in self.ranks:
                break
            symbols[best:best + 2] = [symbols[best] + symbols[best + 1]]
        ids = []
        for s in symbols:
            if s in self.vocab:
                ids.append(self.vocab[s])
            else:  # Byte fallback.
                ids.extend(self.vocab[f"<0x{b:02X}>"] for b in s.encode("utf-8"))
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            piece = self.pieces[i]
            if piece in ("<s>", "</s>", "<unk>"):
                continue
            if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
                out.append(int(piece[3:5], 16))
            else:
                out.extend(piece.replace(SPACE, " ").encode("utf-8"))
        text = out.decode("utf-8", errors="replace")
        return text[1:] if text.startswith(" ") else text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                 "shared", "models", "stories260K")
    parser.add_argument("--model", default=os.environ.get("TESSERA_STORIES_DIR", default_model))
    parser.add_argument("--out", help="file to write (default: stdout)")
    args = parser.parse_args()

    tokenizer = SentencePieceBpe(os.path.join(args.model, "tokenizer.json"))
    with open(os.path.join(args.model, "config.json")) as f:
        bos = json.load(f)["bos_token_id"]
    prompt_ids = [bos] + tokenizer.encode(PROMPT)
    model = Model(args.model)
    generated, logits = model.greedy(prompt_ids, STEPS)
    first = logits[0]
    top5 = np.argsort(-first, kind="stable")[:5]
    record = {
        "what": "Greedy (temperature 0) continuation of one prompt on stories260K, made by "
                "scripts/reference/stories260k_reference.py (numpy forward of "
                "tests/reference/numpy_llama.py on config.json + model.safetensors + "
                "tokenizer.json); the first version came from llama2.c's run.c on "
                "stories260K.bin + tok512.bin and agrees with it.",
        "prompt": PROMPT,
        "prompt_ids": prompt_ids,
        "generated_ids": generated,
        "generated_text": tokenizer.decode(prompt_ids + generated),
        "note": "prompt_ids include BOS (1). generated_text is the prompt followed by the "
                "decoded generated ids.",
        "first_position_logits": [round(float(x), 6) for x in first],
        "first_position_top5": [{"id": int(i), "logit": round(float(first[i]), 6),
                                 "piece": tokenizer.pieces[int(i)].replace(SPACE, " ")}
                                for i in top5],
        "logit_tolerance": "float32 engines agree with these within about 1e-4 absolute",
    }
    text = json.dumps(record, indent=1, ensure_ascii=False) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
