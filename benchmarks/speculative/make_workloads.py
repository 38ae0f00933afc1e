#!/usr/bin/env python3
"""Writes the speculative-decoding benchmark's prompt sets as tessera-bench JSON Lines.

repeated: each prompt is a span of random ids said several times and begun once more,
the shape of summarisation, extraction and code edits where the answer copies its
input; random: random ids, where prompt lookup finds little. Ids are drawn from
[3, vocab) with a fixed seed, so every run offers the same prompts.
"""
import argparse
import json
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--out-prefix", required=True, help="writes PREFIX_repeated.jsonl and PREFIX_random.jsonl")
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--span", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    hi = min(a.vocab, 128000)
    with open(a.out_prefix + "_repeated.jsonl", "w") as f:
        for _ in range(a.num_prompts):
            span = [rng.randrange(3, hi) for _ in range(a.span)]
            ids = [1] + span * a.repeats + span[: a.span // 3]
            f.write(json.dumps({"prompt": ids, "output_len": a.output_len}) + "\n")
    length = 1 + a.span * a.repeats + a.span // 3
    with open(a.out_prefix + "_random.jsonl", "w") as f:
        for _ in range(a.num_prompts):
            ids = [1] + [rng.randrange(3, hi) for _ in range(length - 1)]
            f.write(json.dumps({"prompt": ids, "output_len": a.output_len}) + "\n")


if __name__ == "__main__":
    main()
