#!/usr/bin/env python3
"""Fuzzed constraints through the real grammar engine and a real vocabulary, no model
forward: `tessera constrain` draws each token at random from the set the constraint allows
and every output that completes must satisfy its constraint in Python (jsonschema,
re.fullmatch, membership, a GBNF recognizer: schema_fuzz.check_text).

    structured_fuzz_test.py --tessera BUILD/bin/tessera --log-dir DIR [--vocab llama3|smollm2]
                            [--count 1000] [--seed 1] [--samples 1] [--max-tokens 2000] [unittest args]

Input (schema_fuzz.SchemaFuzzer(seed).cases(count, extras=True)): `count` (default 1,000)
random JSON Schemas built from the supported keywords only (bounded: strings maxLength <= 20
or enum / const / format / bounded pattern, arrays maxItems <= 4, depth <= 4, recursion
through optional branches), then count/7 random regexes, count/20 choice lists and each of
schema_fuzz.GRAMMARS 5 times: 1,222 constraints by default. The command

    tessera constrain --model DIR --schemas-jsonl IN.jsonl --samples N --seed S --max-tokens M

prints one line per sample, {"index", "sample", "text", "complete", "tokens"[, "error"]}, and a
final {"summary": {...}}. Asserted: one line per (index, sample); no "error" (only
supported keywords are generated); every complete text validates; at least 99% complete.
Also: the same seed reproduces the same texts (another seed does not), and unsupported
keywords, regexes and grammars are refused per line with an error naming the keyword while
the other lines still run.

--vocab llama3 (default): a random-weight Llama 3.1 8B shape with Meta's real 128,256-token
Llama 3 tokenizer (see structured_outputs_test.make_random_llama3). --vocab smollm2:
SmolLM2-135M-Instruct's GGUF (49,152 tokens; --count defaults to 300 there). Input, output
and stderr of every run are kept in DIR/structured_fuzz_<vocab>.*.

Exits 77 (skipped) without jsonschema / llama-models / the SmolLM2 file, except under
CI=true, where they must exist.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import schema_fuzz  # noqa: E402
import structured_outputs_test as sot  # noqa: E402

SKIP_CODE = 77
ARGS = None
MODEL = None
TMP = None


def setUpModule():
    global MODEL, TMP
    if ARGS.vocab == "llama3":
        TMP = tempfile.mkdtemp(prefix="tessera-structured-fuzz-")
        MODEL = sot.make_random_llama3(ARGS.tessera, os.path.join(TMP, "llama3-random"))
    else:
        MODEL = sot.serve_util.smollm2_path()


def tearDownModule():
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)


def constrain(cases, tag, *, seed, samples=1, max_tokens=None, timeout=None):
    """Runs `tessera constrain` on `cases`; returns (returncode, output lines, seconds)."""
    base = os.path.join(ARGS.log_dir, f"structured_fuzz_{ARGS.vocab}.{tag}")
    with open(base + ".in.jsonl", "w", encoding="utf-8") as f:
        for case in cases:
            f.write(json.dumps(case, ensure_ascii=False) + "\n")
    start = time.monotonic()
    with open(base + ".out.jsonl", "wb") as out, open(base + ".stderr.log", "wb") as err:
        proc = subprocess.run(
            [ARGS.tessera, "constrain", "--model", MODEL, "--schemas-jsonl", base + ".in.jsonl",
             "--samples", str(samples), "--seed", str(seed), "--max-tokens", str(max_tokens or ARGS.max_tokens)],
            stdout=out, stderr=err, timeout=timeout or ARGS.timeout)
    seconds = time.monotonic() - start
    with open(base + ".out.jsonl", encoding="utf-8", errors="replace") as f:
        lines = [line for line in f if line.strip()]
    if proc.returncode != 0:
        with open(base + ".stderr.log", errors="replace") as f:
            print(f"constrain ({tag}) exited {proc.returncode}; stderr tail:\n{f.read()[-3000:]}", flush=True)
    return proc.returncode, lines, seconds


def results_by_key(lines):
    out = {}
    for line in lines:
        r = json.loads(line)
        if "summary" not in r:
            out.setdefault((r["index"], r.get("sample", 0)), []).append(r)
    return out


class ConstrainFuzzTest(unittest.TestCase):
    def test_fuzzed_constraints_validate(self):
        cases = schema_fuzz.SchemaFuzzer(ARGS.seed).cases(ARGS.count, extras=True)
        schemas = [c["json_schema"] for c in cases if "json_schema" in c]
        print(f"{len(cases)} constraints ({len(schemas)} JSON Schemas); schemas per keyword: "
              f"{json.dumps(schema_fuzz.keyword_counts(schemas))}", flush=True)
        rc, lines, seconds = constrain(cases, "main", seed=ARGS.seed, samples=ARGS.samples)
        self.assertEqual(rc, 0, "tessera constrain failed (see the .stderr.log)")
        report = schema_fuzz.check_results(cases, lines)
        by_key = results_by_key(lines)
        kinds = {}
        for (index, _), rs in by_key.items():
            kind = next(iter(cases[index]))
            k = kinds.setdefault(kind, {"samples": 0, "complete": 0})
            k["samples"] += len(rs)
            k["complete"] += sum(1 for r in rs if r.get("complete") and "error" not in r)
        print(f"{seconds:.1f} s; samples {report['samples']}, complete {report['complete']}, incomplete "
              f"{report['incomplete']}, invalid {len(report['invalid'])}, errors {len(report['errors'])}; "
              f"per kind {json.dumps(kinds)}; summary {json.dumps(report['summary'])}", flush=True)
        for bad in report["invalid"][:30]:
            print("INVALID", json.dumps(bad, ensure_ascii=True)[:3000], flush=True)
        for bad in report["errors"][:30]:
            print("ERROR", json.dumps(bad, ensure_ascii=True)[:3000], flush=True)

        want = {(i, s) for i in range(len(cases)) for s in range(ARGS.samples)}
        self.assertEqual(set(by_key), want, "not exactly one line per (index, sample)")
        self.assertTrue(all(len(rs) == 1 for rs in by_key.values()), "an (index, sample) printed twice")
        self.assertIsNotNone(report["summary"], "no summary line")
        self.assertEqual(report["errors"], [], "supported constraints were refused")
        self.assertEqual(report["invalid"], [], "complete outputs that do not satisfy their constraint")
        self.assertGreaterEqual(report["complete"], 0.99 * report["samples"], "fewer than 99% of the samples completed")
        for kind, k in kinds.items():
            with self.subTest(kind=kind):
                self.assertGreaterEqual(k["complete"], 0.99 * k["samples"], f"{kind}: fewer than 99% completed")

    def test_same_seed_same_texts(self):
        cases = schema_fuzz.SchemaFuzzer(ARGS.seed + 100).cases(40, extras=False)
        runs = []
        for tag, seed in (("repro-a", 11), ("repro-b", 11), ("repro-c", 12)):
            rc, lines, _ = constrain(cases, tag, seed=seed, samples=2, max_tokens=ARGS.max_tokens)
            self.assertEqual(rc, 0)
            runs.append({k: (rs[0].get("text"), rs[0].get("complete")) for k, rs in results_by_key(lines).items()})
        self.assertEqual(runs[0], runs[1], "the same seed gave different texts")
        self.assertNotEqual(runs[0], runs[2], "another seed gave the same texts")
        # Samples of one constraint differ too (draws go on from one sample to the next).
        self.assertTrue(any(runs[0][(i, 0)] != runs[0][(i, 1)] for i in range(len(cases))))

    def test_unsupported_refused_per_line(self):
        cases = [{"json_schema": schema} for _, schema in sot.UNSUPPORTED]
        cases += [{"regex": r} for r in sot.BAD_REGEXES]
        cases += [{"grammar": g} for g in sot.BAD_GRAMMARS]
        cases.append({"choice": ["still", "fine"]})
        rc, lines, _ = constrain(cases, "unsupported", seed=1, samples=1, max_tokens=50)
        by_key = results_by_key(lines)
        self.assertEqual(set(by_key), {(i, 0) for i in range(len(cases))}, lines[-5:])
        for i, (keyword, _) in enumerate(sot.UNSUPPORTED):
            with self.subTest(keyword=keyword):
                r = by_key[(i, 0)][0]
                self.assertIn("error", r, r)
                self.assertTrue(sot.names_keyword(r["error"], keyword), r["error"])
        for i in range(len(sot.UNSUPPORTED), len(cases) - 1):
            with self.subTest(case=cases[i]):
                self.assertIn("error", by_key[(i, 0)][0])
        last = by_key[(len(cases) - 1, 0)][0]
        self.assertNotIn("error", last)
        self.assertTrue(last["complete"])
        self.assertIn(last["text"], ["still", "fine"])


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--vocab", choices=["llama3", "smollm2"], default="llama3")
    parser.add_argument("--count", type=int, default=None, help="JSON Schemas (default 1000; 300 for smollm2)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=2000)
    parser.add_argument("--timeout", type=int, default=480, help="seconds for one `tessera constrain` run")
    ARGS, rest = parser.parse_known_args()
    if ARGS.count is None:
        ARGS.count = 1000 if ARGS.vocab == "llama3" else 300
    os.makedirs(ARGS.log_dir, exist_ok=True)
    ci = os.environ.get("CI") in ("true", "1")
    problem = sot.check_environment(["random"] if ARGS.vocab == "llama3" else ["smollm2"], modules=("jsonschema",))
    if problem:
        print(problem)
        return 1 if ci else SKIP_CODE
    result = unittest.main(argv=[sys.argv[0], "-v", *rest], exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
