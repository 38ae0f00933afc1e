#!/usr/bin/env python3
"""Same prompt ids, greedy, in llama.cpp and in Tessera: the generated ids must be equal.

    check_same_tokens.py --tessera-bin build/bin --peer-bin PEER/build/bin \
        --hf-model DIR --gguf FILE [--prompts 3] [--prompt-len 8] [--max-tokens 16]

The correctness gate before a side-by-side timing on converted weights (hf_to_gguf.py):
for each of --prompts random prompts (ids uniform in [3, vocab_size), seed --seed), it runs
`tessera run --prompt-ids ... --temperature 0 --ignore-eos --json` and POSTs the same ids
to llama-server's /completion (temperature 0, ignore_eos, return_tokens, n_probs 2,
cache_prompt false), and compares the generated ids. At the first difference it reports
where Tessera's token stands in the peer's top 10 there and how far below the peer's first
in log-probability (a near-tie is rounding: the engines sum in different orders; a wide
gap is a conversion error). Writes a JSON record with --out; exits 1 when any prompt differs.
"""
import argparse
import json
import pathlib
import random
import subprocess
import sys
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from side_by_side import free_port, wait_http  # noqa: E402


def tessera_ids(a, prompt):
    out = subprocess.run(
        [str(a.tessera_bin / "tessera"), "run", "--model", str(a.hf_model),
         "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", str(a.max_tokens),
         "--temperature", "0", "--ignore-eos", "--threads", str(a.threads), "--json", "--quiet"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["generated_ids"]


def peer_ids(port, a, prompt):
    body = json.dumps({"prompt": prompt, "n_predict": a.max_tokens, "temperature": 0,
                       "ignore_eos": True, "cache_prompt": False, "return_tokens": True,
                       "n_probs": 10}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        j = json.loads(r.read())
    return j["tokens"], j.get("completion_probabilities", [])


def align(tokens, probs):
    """Token index -> its completion_probabilities entry. llama-server gives one entry per
    piece of text, so a token that ends in an incomplete UTF-8 sequence has none."""
    out, j = {}, 0
    for i, t in enumerate(tokens):
        if j < len(probs) and probs[j].get("id") == t:
            out[i] = probs[j]
            j += 1
    return out


def peer_top(step, n):
    alts = step.get("top_logprobs") or step.get("top_probs") or []
    return [{k: v for k, v in alt.items() if k in ("id", "logprob", "prob")} for alt in alts[:n]]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tessera-bin", type=pathlib.Path, default=pathlib.Path("build/bin"))
    p.add_argument("--peer-bin", type=pathlib.Path, required=True)
    p.add_argument("--hf-model", type=pathlib.Path, required=True)
    p.add_argument("--gguf", type=pathlib.Path, required=True)
    p.add_argument("--prompts", type=int, default=3)
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=pathlib.Path)
    a = p.parse_args()

    vocab = int(json.loads((a.hf_model / "config.json").read_text())["vocab_size"])
    rng = random.Random(a.seed)
    prompts = [[rng.randint(3, vocab - 1) for _ in range(a.prompt_len)] for _ in range(a.prompts)]

    port = free_port()
    log = open(pathlib.Path("/tmp") / f"check_same_tokens.llama-server.{port}.log", "w")
    proc = subprocess.Popen(
        [str(a.peer_bin / "llama-server"), "-m", str(a.gguf), "-t", str(a.threads), "-c", "1024",
         "-np", "1", "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    records = []
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, 600)
        for prompt in prompts:
            theirs, probs = peer_ids(port, a, prompt)
            ours = tessera_ids(a, prompt)
            first = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y),
                         None if len(ours) == len(theirs) else min(len(ours), len(theirs)))
            rec = {"prompt_ids": prompt, "tessera": ours, "llama.cpp": theirs, "equal": first is None}
            if first is not None:
                rec["first_difference"] = first
                at = align(theirs, probs)
                if first not in at:
                    rec["peer_top10_there"] = None  # an incomplete UTF-8 piece: no probabilities
                elif first < len(ours):
                    top = peer_top(at[first], 10)
                    rec["peer_top10_there"] = top
                    rank = next((i for i, t in enumerate(top) if t["id"] == ours[first]), None)
                    rec["tessera_choice_rank_in_peer_top10"] = rank
                    if rank is not None and "logprob" in top[0]:
                        rec["peer_logprob_gap_to_tessera_choice"] = top[0]["logprob"] - top[rank]["logprob"]
            records.append(rec)
            print(f"{'same' if first is None else f'DIFFER at {first}'}: prompt {prompt}\n"
                  f"  tessera   {ours}\n  llama.cpp {theirs}", flush=True)
            if first is not None and rec.get("peer_top10_there") is None:
                print(f"  at {first} llama-server gives no probabilities (its token there ends in an "
                      f"incomplete UTF-8 sequence)", flush=True)
            elif first is not None:
                rank = rec["tessera_choice_rank_in_peer_top10"]
                gap = rec.get("peer_logprob_gap_to_tessera_choice")
                print(f"  at {first} Tessera's token is llama.cpp's choice number "
                      f"{'>10' if rank is None else rank + 1}"
                      f"{'' if gap is None else f', {gap:.4f} below its first in log-probability'}; "
                      f"llama.cpp's top 3 there: {rec['peer_top10_there'][:3]}", flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    ok = all(r["equal"] for r in records)
    result = {"model": str(a.hf_model), "gguf": str(a.gguf), "max_tokens": a.max_tokens,
              "threads": a.threads, "all_equal": ok, "prompts": records}
    if a.out:
        a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{sum(r['equal'] for r in records)} of {len(records)} prompts give the same ids")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
