#!/usr/bin/env python3
"""Structured outputs end to end: every output generated under a constraint satisfies it,
checked in Python (the `jsonschema` package for JSON Schema, `re.fullmatch` for regexes,
membership for choices, a recognizer for GBNF grammars; schema_fuzz.check_text).

    structured_outputs_test.py --tessera BUILD/bin/tessera --log-dir DIR
                               [--models random,smollm2] [TestClass[.test_method] ...]

structured_schemas.json is a list of {"name", "schema"} entries; "via": "guided_json" sends
the schema as vLLM's guided_json (else response_format json_schema, strict); entries with
"smollm2": true also carry an extraction "prompt" and "expect" (values, compared as
case-insensitive substrings, that a sensible greedy answer holds).

Two models, each behind `tessera serve` and the official `openai` SDK:

* RandomLlama3Test: a random-weight Llama 3.1 8B shape cut to 2 layers and hidden 64
  (`tessera gen-checkpoint --preset llama3.1-8b ...`) with Meta's real 128,256-token Llama 3
  tokenizer (scripts/llama3_tokenizer_json.py, from the llama-models package) and a Llama 3
  chat template. Its output is gibberish, so every string in the suite is bounded
  (maxLength, enum, const, format or a bounded pattern) and every array has maxItems; each
  request gets max_tokens 1500 and must end with finish_reason "stop" (the grammar is
  complete, only EOS is left) and validate. Requests (about 270, 4 in flight):
    - all 70 schemas of structured_schemas.json at temperature 0 and 1 (140), through
      response_format json_schema (strict) or, for non-object roots and a few others,
      vLLM's guided_json;
    - 30 schemas of schema_fuzz.SchemaFuzzer(seed 7) at temperature 1 (HTTP path of the fuzzer);
    - regex (phone, date, email-like, unicode alternation), choice (labels, shared
      prefixes) and GBNF (arithmetic, key=value list, nested lists) at temperature 0 and 1;
    - json_object (starts with "{", valid when it stops); a streamed request equal to the
      unary one; the /v1/completions endpoint with guided_json and guided_choice; vLLM's
      newer structured_outputs {json, choice, regex, json_object} and guided_json as JSON
      text; two constraints in one request: 400;
    - unsupported JSON Schema keywords (patternProperties, if/then, not, multipleOf,
      uniqueItems, propertyNames, contains, dependentRequired, a remote $ref), unsupported
      regexes and broken grammars: HTTP 400 naming the keyword;
    - greedy equivalence: where the unconstrained greedy output T (reproducible, no
      special tokens, valid UTF-8) satisfies a constraint (guided_choice containing T,
      guided_regex matching T literally, guided_regex [\\s\\S]*), the constrained greedy
      output is T.
* SmolLm2Test: SmolLM2-135M-Instruct (Q4_1 GGUF; scripts/setup.sh fetches it,
  $TESSERA_SMOLLM2_GGUF overrides), a real trained model, on the 14 suite entries that
  carry an extraction "prompt" (e.g. "Extract the person's name, age and city from: ...")
  at temperature 0 and 1 (28 requests), plus choice / regex / grammar requests with real
  prompts at temperature 0 and 1 (8), json_object (1) and the greedy equivalence (3
  prompts, up to 15 requests of 24-32 tokens). Every output must validate; at
  temperature 0 the extracted values are compared with the entry's "expect" and at least
  --min-sensible (default 0.4) of the cases must get them all (a shifted or wrong token
  mask gives valid nonsense). Every output is printed (ctest's log) and written to
  DIR/structured_outputs_<model>.jsonl.

Formats: validation uses jsonschema.Draft202012Validator.FORMAT_CHECKER (bare
jsonschema.FormatChecker() checks "time" with draft 3's %H:%M:%S, which refuses RFC 3339
times). It verifies date-time and time only with the rfc3339-validator package (which
refuses second 60, year 0000, impossible days such as 2023-02-29 and times without an
offset), date by datetime.date.fromisoformat, uuid by uuid.UUID plus the dash positions, and
email only by the presence of "@". The test fails at start (skip outside CI) when the
checker does not verify date-time, date, time, email and uuid.

Exits 77 (skipped) when a model or the openai / jsonschema / llama-models packages are
missing, except under CI=true, where they must exist.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
import schema_fuzz  # noqa: E402
import serve_util  # noqa: E402

SKIP_CODE = 77
ARGS = None
SUITE_PATH = os.path.join(HERE, "structured_schemas.json")

# Llama 3's chat format (the random checkpoint ships none).
LLAMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")

# The suite must keep covering these (schema_fuzz.keyword_counts names).
REQUIRED_KEYWORDS = [
    "type:string", "type:integer", "type:number", "type:boolean", "type:null", "type:object", "type:array",
    "type:list", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems",
    "maxItems", "anyOf", "oneOf", "$ref", "$defs", "recursive", "pattern", "format:date-time", "format:email",
    "format:uuid", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
    "prefixItems",
]

PHONE = r"\(\d{3}\) \d{3}-\d{4}"
REGEXES = [
    PHONE,
    r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
    r"[a-z]{1,10}@[a-z]{1,10}\.(com|org|net)",
    "(caf\u00e9|na\u00efve|\u65e5\u672c){1,3}",
    r"(?:yes|no)[.!]?",
]
CHOICES = [
    ["positive", "negative", "neutral"],
    ["New York", "New York City", "NYC"],
    ["a", "ab", "abc"],
    ["caf\u00e9", "\u65e5\u672c\u8a9e", "say \"hi\"", "two\nlines"],
]
GRAMMAR_NAMES = ["arithmetic", "key_values", "nested_list"]

# Unsupported keywords: the schema and the keyword the 400 must name.
UNSUPPORTED = [
    ("patternProperties", {"type": "object", "properties": {"tags": {"type": "object", "patternProperties": {"^a": {"type": "string"}}}}}),
    ("if", {"type": "string", "if": {"maxLength": 3}, "then": {"pattern": "^a"}}),
    ("not", {"not": {"type": "null"}}),
    ("multipleOf", {"type": "integer", "multipleOf": 3}),
    ("uniqueItems", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "maxItems": 3}),
    ("propertyNames", {"type": "object", "propertyNames": {"maxLength": 3}}),
    ("contains", {"type": "array", "contains": {"type": "integer"}, "maxItems": 3}),
    ("dependentRequired", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "dependentRequired": {"a": ["b"]}, "additionalProperties": False}),
    ("$ref", {"type": "object", "properties": {"x": {"$ref": "https://example.com/schemas/x.json"}}}),
]
BAD_REGEXES = [r"(a)\1", r"(?=a)a", r"a(?!b)"]
BAD_GRAMMARS = ["root ::= (", "expr ::= \"a\"\n", "root ::= undefined_rule\n"]


def suite_constraint(entry):
    """The request fields that send a suite entry's schema (response_format, or guided_json)."""
    if entry.get("via") == "guided_json":
        return {"extra_body": {"guided_json": entry["schema"]}}
    return {"response_format": {"type": "json_schema",
                                "json_schema": {"name": entry["name"], "schema": entry["schema"], "strict": True}}}


def load_suite():
    with open(SUITE_PATH, encoding="utf-8") as f:
        return json.load(f)


def make_random_llama3(tessera, out_dir, seed=7):
    """A random-weight Llama 3.1 8B shape (2 layers, hidden 64) with the real Llama 3 tokenizer
    and a Llama 3 chat template, written to `out_dir`."""
    subprocess.run([tessera, "gen-checkpoint", "--preset", "llama3.1-8b", "--layers", "2", "--hidden", "64",
                    "--intermediate", "128", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
                    "--seed", str(seed), "--out", out_dir],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # Meta's vocabulary instead of gen-checkpoint's synthetic one (same size and special ids).
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "llama3_tokenizer_json.py"), "--out", out_dir],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with open(os.path.join(out_dir, "tokenizer.json"), encoding="utf-8") as f:
        pieces = len(json.load(f)["model"]["vocab"])
    if pieces != 128000:
        raise AssertionError(f"expected the real Llama 3 vocabulary (128000 pieces), got {pieces}")
    with open(os.path.join(out_dir, "chat_template.jinja"), "w") as f:
        f.write(LLAMA3_CHAT_TEMPLATE)
    return out_dir


def literal_regex(text):
    """A regex (the supported ECMAScript subset) that matches exactly `text`."""
    out = []
    for c in text:
        if c in "\\^$.|?*+()[]{}":
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif ord(c) < 0x20 or ord(c) == 0x7f:
            out.append("\\x%02x" % ord(c))
        else:
            out.append(c)
    return "".join(out)


def error_message(reply):
    err = reply.get("error") if isinstance(reply, dict) else None
    if isinstance(err, dict):
        return str(err.get("message", ""))
    return json.dumps(reply)


def names_keyword(message, keyword):
    """Whether an error message names a JSON Schema keyword: quoted ("if", 'not', `x`), or
    for longer keywords as a whole word."""
    k = re.escape(keyword)
    if re.search(rf"[\"'`]{k}[\"'`]", message):
        return True
    return len(keyword) > 3 and re.search(rf"(?<![\w$]){k}(?!\w)", message) is not None


def describe(text, limit=600):
    s = json.dumps(text, ensure_ascii=True)
    return s if len(s) <= limit else s[:limit] + f"... ({len(text)} chars)"


class ServerMixin:
    """A `tessera serve` per test class; `chat()` / `post()` against it."""

    server = None
    model_name = None
    log_name = None
    records = None

    @classmethod
    def start(cls, model, extra=()):
        cls.records = []
        cls.server = serve_util.Serve(ARGS.tessera, model, os.path.join(ARGS.log_dir, f"{cls.log_name}.serve.log"),
                                      extra=extra)
        try:
            cls.server.wait_ready(timeout=300)
        except BaseException:
            cls.server.stop()
            raise
        cls.model_name = cls.client().models.list().data[0].id

    @classmethod
    def stop(cls):
        if cls.server is not None:
            cls.server.stop()
        if cls.records:
            with open(os.path.join(ARGS.log_dir, f"structured_outputs_{cls.log_name}.jsonl"), "w") as f:
                for r in cls.records:
                    f.write(json.dumps(r, ensure_ascii=True, default=str) + "\n")

    @classmethod
    def client(cls):
        import openai
        return openai.OpenAI(base_url=cls.server.base + "/v1", api_key="unused", max_retries=0, timeout=600)

    def chat(self, content, *, constraint=None, temperature=0.0, max_tokens=None, seed=None, **extra):
        """(text, finish_reason, response) of one chat completion; `constraint` is
        {"response_format": ...} and/or {"extra_body": ...}."""
        kwargs = dict(model=self.model_name, messages=[{"role": "user", "content": content}],
                      max_tokens=max_tokens or ARGS.max_tokens, temperature=temperature, top_p=1.0)
        if seed is not None:
            kwargs["seed"] = seed
        kwargs.update(constraint or {})
        kwargs.update(extra)
        r = self.client().chat.completions.create(**kwargs)
        return r.choices[0].message.content or "", r.choices[0].finish_reason, r

    def post(self, path, body):
        req = urllib.request.Request(self.server.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read().decode())
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                return e.code, json.loads(text)
            except ValueError:
                return e.code, {"raw": text}

    def run_cases(self, cases, workers=None):
        """Runs [(label, case, prompt, constraint, temperature, seed)] (a few at a time, so the
        server batches them), checks each output, records it, and returns the results."""

        def one(c):
            label, case, prompt, constraint, temperature, seed = c
            start = time.monotonic()
            try:
                text, finish, r = self.chat(prompt, constraint=constraint, temperature=temperature, seed=seed)
            except Exception as e:  # noqa: BLE001 - reported as the case's failure.
                return dict(label=label, temperature=temperature, error=f"{type(e).__name__}: {e}", ok=False)
            ok, why = schema_fuzz.check_text(case, text)
            if finish != "stop":
                ok, why = False, f"finish_reason {finish!r} (want 'stop'){'; ' + why if why else ''}"
            return dict(label=label, temperature=temperature, text=text, finish_reason=finish, ok=ok, why=why,
                        completion_tokens=r.usage.completion_tokens if r.usage else None,
                        seconds=round(time.monotonic() - start, 2))

        with concurrent.futures.ThreadPoolExecutor(max_workers=workers or ARGS.workers) as pool:
            results = list(pool.map(one, cases))
        for res in results:
            self.records.append(res)
            mark = "ok  " if res["ok"] else "FAIL"
            print(f"[{self.log_name}] {mark} {res['label']} T={res['temperature']}: "
                  f"{describe(res.get('text', res.get('error')))} ({res.get('finish_reason')}, "
                  f"{res.get('completion_tokens')} tokens){'' if res['ok'] else ' -- ' + res.get('why', res.get('error', ''))}",
                  flush=True)
        return results

    def assert_all_ok(self, results):
        for res in results:
            with self.subTest(case=res["label"], temperature=res["temperature"]):
                self.assertTrue(res["ok"], f"{res.get('why') or res.get('error')}: {describe(res.get('text', ''))}")

    # -- shared tests
    def greedy_equivalence(self, prompts, n_tokens):
        """Where the unconstrained greedy output T satisfies a constraint, the constrained
        greedy output is T. Returns how many prompts qualified."""
        qualified = 0
        for prompt in prompts:
            t1, f1, r1 = self.chat(prompt, max_tokens=n_tokens, logprobs=True)
            t2, f2, _ = self.chat(prompt, max_tokens=n_tokens)
            tokens = [c.token for c in (r1.choices[0].logprobs.content or [])] if r1.choices[0].logprobs else []
            why = None
            if (t1, f1) != (t2, f2):
                why = "unconstrained greedy output not reproducible"
            elif not t1:
                why = "empty output"
            elif "\ufffd" in t1:
                why = "output holds U+FFFD (a token cut a UTF-8 sequence)"
            elif any("<|" in t for t in tokens):
                why = "output holds a special token"
            print(f"[{self.log_name}] greedy reference for {prompt!r}: {describe(t1)} ({f1})"
                  f"{' -- skipped: ' + why if why else ''}", flush=True)
            if why:
                continue
            qualified += 1
            half = t1[:max(1, len(t1) // 2)]
            constraints = [
                ("guided_choice", {"extra_body": {"guided_choice": ["zzz-not-this", half, t1]}}, n_tokens + 8, "stop"),
                ("guided_regex literal", {"extra_body": {"guided_regex": literal_regex(t1)}}, n_tokens + 8, "stop"),
                ("guided_regex [\\s\\S]*", {"extra_body": {"guided_regex": r"[\s\S]*"}}, n_tokens, f1),
            ]
            for name, constraint, max_tokens, want_finish in constraints:
                with self.subTest(prompt=prompt, constraint=name):
                    t, f, _ = self.chat(prompt, constraint=constraint, max_tokens=max_tokens)
                    self.records.append(dict(label=f"greedy-equivalence {name}", prompt=prompt, reference=t1, text=t,
                                             finish_reason=f, ok=t == t1))
                    self.assertEqual(t, t1, f"{name}: constrained greedy output differs from the unconstrained one")
                    self.assertEqual(f, want_finish, name)
        return qualified


class RandomLlama3Test(ServerMixin, unittest.TestCase):
    log_name = "random_llama3"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-structured-")
        model = make_random_llama3(ARGS.tessera, os.path.join(cls.tmp, "llama3-random"))
        cls.start(model)

    @classmethod
    def tearDownClass(cls):
        cls.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_suite_schemas_at_temperature_0_and_1(self):
        suite = load_suite()
        cases = []
        for n, entry in enumerate(suite):
            schema = entry["schema"]
            constraint = suite_constraint(entry)
            prompt = f"Reply with one JSON value for \"{entry['name']}\"."
            for temperature in (0.0, 1.0):
                cases.append((entry["name"], {"json_schema": schema}, prompt, constraint, temperature, 1000 + n))
        results = self.run_cases(cases)
        print(f"[{self.log_name}] suite: {sum(r['ok'] for r in results)}/{len(results)} valid", flush=True)
        self.assert_all_ok(results)

    def test_fuzzed_schemas_over_http(self):
        fuzzer = schema_fuzz.SchemaFuzzer(7)
        cases = []
        for i in range(ARGS.http_fuzz):
            schema = fuzzer.schema(i)
            cases.append((f"fuzz-seed7-{i}", {"json_schema": schema}, "Reply with JSON.",
                          {"extra_body": {"guided_json": schema}}, 1.0, 2000 + i))
        self.assert_all_ok(self.run_cases(cases))

    def test_regex_choice_and_grammar(self):
        cases = []
        for temperature in (0.0, 1.0):
            for k, r in enumerate(REGEXES):
                cases.append((f"regex {r}", {"regex": r}, "Reply.", {"extra_body": {"guided_regex": r}}, temperature, 3000 + k))
            for k, c in enumerate(CHOICES):
                cases.append((f"choice {c}", {"choice": c}, "Pick one.", {"extra_body": {"guided_choice": c}},
                              temperature, 3100 + k))
            for k, g in enumerate(schema_fuzz.GRAMMARS):
                if g["name"] in GRAMMAR_NAMES:
                    cases.append((f"grammar {g['name']}", {"grammar": g["gbnf"]}, "Reply.",
                                  {"extra_body": {"guided_grammar": g["gbnf"]}}, temperature, 3200 + k))
        self.assert_all_ok(self.run_cases(cases))

    def test_json_object(self):
        for temperature in (0.0, 1.0):
            text, finish, _ = self.chat("Reply with a JSON object.", constraint={"response_format": {"type": "json_object"}},
                                        temperature=temperature, max_tokens=300, seed=5)
            self.records.append(dict(label="json_object", temperature=temperature, text=text, finish_reason=finish))
            print(f"[{self.log_name}] json_object T={temperature}: {describe(text)} ({finish})", flush=True)
            with self.subTest(temperature=temperature):
                self.assertTrue(text.lstrip(" \n\t").startswith("{"), describe(text))
                if finish == "stop":
                    ok, why = schema_fuzz.check_json(None, text)
                    self.assertTrue(ok, f"{why}: {describe(text)}")

    def test_stream_equals_unary(self):
        entry = next(e for e in load_suite() if e["name"] == "kitchen_sink")
        constraint = {"response_format": {"type": "json_schema",
                                          "json_schema": {"name": "kitchen_sink", "schema": entry["schema"], "strict": True}}}
        unary, finish, _ = self.chat("Reply with JSON.", constraint=constraint)
        chunks = list(self.client().chat.completions.create(
            model=self.model_name, messages=[{"role": "user", "content": "Reply with JSON."}], max_tokens=ARGS.max_tokens,
            temperature=0, top_p=1.0, stream=True, **constraint))
        streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        reasons = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        self.assertEqual(streamed, unary)
        self.assertEqual(reasons, ["stop"])
        self.assertEqual(finish, "stop")
        ok, why = schema_fuzz.check_json(entry["schema"], streamed)
        self.assertTrue(ok, why)

    def test_completions_endpoint(self):
        schema = next(e for e in load_suite() if e["name"] == "ref_defs_point")["schema"]
        c = self.client()
        r = c.completions.create(model=self.model_name, prompt="JSON:", max_tokens=ARGS.max_tokens, temperature=0,
                                 extra_body={"guided_json": schema})
        ok, why = schema_fuzz.check_json(schema, r.choices[0].text)
        self.assertTrue(ok, f"{why}: {describe(r.choices[0].text)}")
        self.assertEqual(r.choices[0].finish_reason, "stop")
        r = c.completions.create(model=self.model_name, prompt="Label:", max_tokens=20, temperature=1, seed=3,
                                 extra_body={"guided_choice": CHOICES[1]})
        self.assertIn(r.choices[0].text, CHOICES[1])
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_other_request_shapes(self):
        """vLLM's newer structured_outputs object, guided_json as JSON text; two constraints
        at once are a 400."""
        schema = next(e for e in load_suite() if e["name"] == "any_of_objects")["schema"]
        cases = [
            ("structured_outputs.json", {"json_schema": schema}, {"extra_body": {"structured_outputs": {"json": schema}}}),
            ("structured_outputs.choice", {"choice": CHOICES[0]},
             {"extra_body": {"structured_outputs": {"choice": CHOICES[0]}}}),
            ("structured_outputs.regex", {"regex": PHONE}, {"extra_body": {"structured_outputs": {"regex": PHONE}}}),
            ("guided_json as text", {"json_schema": schema}, {"extra_body": {"guided_json": json.dumps(schema)}}),
        ]
        self.assert_all_ok(self.run_cases([(label, case, "Reply.", c, t, 6000 + k)
                                           for k, (label, case, c) in enumerate(cases) for t in (0.0, 1.0)]))
        text, _, _ = self.chat("Reply.", constraint={"extra_body": {"structured_outputs": {"json_object": True}}},
                               max_tokens=100)
        self.assertTrue(text.lstrip(" \n\t").startswith("{"), describe(text))
        status, reply = self.post("/v1/chat/completions", {
            "model": self.model_name, "messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
            "response_format": {"type": "json_object"}, "guided_regex": "a+"})
        self.assertEqual(status, 400, reply)

    def test_unsupported_features_are_400_naming_them(self):
        messages = [{"role": "user", "content": "x"}]
        for keyword, schema in UNSUPPORTED:
            for shape, body in [
                ("response_format", {"response_format": {"type": "json_schema",
                                                         "json_schema": {"name": "x", "schema": schema, "strict": True}}}),
                ("guided_json", {"guided_json": schema}),
            ]:
                with self.subTest(keyword=keyword, shape=shape):
                    status, reply = self.post("/v1/chat/completions",
                                              {"model": self.model_name, "messages": messages, "max_tokens": 4, **body})
                    self.assertEqual(status, 400, reply)
                    self.assertTrue(names_keyword(error_message(reply), keyword), reply)
        for regex in BAD_REGEXES:
            with self.subTest(regex=regex):
                status, reply = self.post("/v1/chat/completions", {"model": self.model_name, "messages": messages,
                                                                   "max_tokens": 4, "guided_regex": regex})
                self.assertEqual(status, 400, reply)
        for grammar in BAD_GRAMMARS:
            with self.subTest(grammar=grammar):
                status, reply = self.post("/v1/chat/completions", {"model": self.model_name, "messages": messages,
                                                                   "max_tokens": 4, "guided_grammar": grammar})
                self.assertEqual(status, 400, reply)
        # The server still serves after the refusals.
        text, finish, _ = self.chat("x", constraint={"extra_body": {"guided_choice": ["fine"]}})
        self.assertEqual((text, finish), ("fine", "stop"))

    def test_greedy_equivalence(self):
        prompts = ["Once upon a time", "Tell me a story.", "Hello!", "What is 2 + 2?", "List three colors.",
                   "Write a haiku.", "Say something.", "Continue: the quick brown fox"]
        qualified = self.greedy_equivalence(prompts, n_tokens=12)
        self.assertGreaterEqual(qualified, 2, "too few prompts gave a usable unconstrained reference")


class SmolLm2Test(ServerMixin, unittest.TestCase):
    log_name = "smollm2"

    @classmethod
    def setUpClass(cls):
        # KV for a few concurrent requests of a few hundred tokens (16 MiB holds ~700 tokens).
        cls.start(serve_util.smollm2_path(), extra=("--kv-memory-mb", "256", "--threads", "2"))

    @classmethod
    def tearDownClass(cls):
        cls.stop()

    def test_extraction_schemas(self):
        entries = [e for e in load_suite() if e.get("smollm2")]
        cases = []
        for n, entry in enumerate(entries):
            constraint = {"response_format": {"type": "json_schema",
                                              "json_schema": {"name": entry["name"], "schema": entry["schema"], "strict": True}}}
            for temperature in (0.0, 1.0):
                cases.append((entry["name"], {"json_schema": entry["schema"]}, entry["prompt"], constraint,
                              temperature, 4000 + n))
        results = self.run_cases(cases, workers=2)
        self.assert_all_ok(results)
        # At temperature 0 the content should make sense.
        sensible = 0
        greedy = [r for r in results if r["temperature"] == 0.0]
        for entry, res in zip(entries, greedy):
            misses = []
            try:
                value = schema_fuzz.parse_json(res.get("text", ""))
            except ValueError:
                value = None
            for key, want in entry.get("expect", {}).items():
                got = value.get(key) if isinstance(value, dict) else None
                if str(want).lower() not in json.dumps(got, ensure_ascii=False, default=str).lower():
                    misses.append(f"{key}: want {want!r}, got {got!r}")
            sensible += not misses
            print(f"[{self.log_name}] sense {entry['name']}: {'matches' if not misses else '; '.join(misses)}", flush=True)
        print(f"[{self.log_name}] {sensible}/{len(greedy)} greedy extractions hold every expected value", flush=True)
        self.assertGreaterEqual(sensible, ARGS.min_sensible * len(greedy),
                                "constrained greedy extractions mostly miss the expected values (mask misaligned?)")

    def test_rest_of_the_suite_at_temperature_0_and_1(self):
        """The suite's other schemas (with test_extraction_schemas: all of it) on the real
        model, prompted with the schema itself. The two recursive schemas run at
        temperature 1 only: greedy, this 135M model repeats the recursion ({"value": 10,
        "children": [{"value": 10, ...) until max_tokens, every prefix valid but never
        closed; a grammar cannot bound a recursion that the schema leaves unbounded."""
        cases = []
        for n, entry in enumerate(load_suite()):
            if entry.get("smollm2"):
                continue
            recursive = entry["name"].startswith("recursive")
            schema = entry["schema"]
            constraint = suite_constraint(entry)
            prompt = (f"Write one example of JSON data named \"{entry['name']}\" that follows this JSON Schema: "
                      f"{json.dumps(schema)}")
            for temperature in ((1.0,) if recursive else (0.0, 1.0)):
                cases.append((entry["name"], {"json_schema": schema}, prompt, constraint, temperature, 6000 + n))
        results = self.run_cases(cases, workers=4)
        print(f"[{self.log_name}] rest of the suite: {sum(r['ok'] for r in results)}/{len(results)} valid", flush=True)
        self.assert_all_ok(results)

    def test_choice_regex_grammar_with_real_prompts(self):
        arithmetic = next(g for g in schema_fuzz.GRAMMARS if g["name"] == "arithmetic")["gbnf"]
        specs = [
            ("sentiment choice", {"choice": CHOICES[0]},
             "Classify the sentiment of this review as positive, negative or neutral: \"I absolutely loved this movie!\"",
             {"extra_body": {"guided_choice": CHOICES[0]}}, "positive"),
            ("phone regex", {"regex": PHONE},
             "What is the phone number in this text? \"Call our office at (555) 123-4567 before noon.\"",
             {"extra_body": {"guided_regex": PHONE}}, "(555) 123-4567"),
            ("date regex", {"regex": REGEXES[1]},
             "Write the date 15 March 2024 in ISO format.", {"extra_body": {"guided_regex": REGEXES[1]}}, "2024-03-15"),
            ("arithmetic grammar", {"grammar": arithmetic},
             "Write an arithmetic expression that equals 10.", {"extra_body": {"guided_grammar": arithmetic}}, None),
        ]
        cases = [(label, case, prompt, constraint, t, 5000 + k)
                 for k, (label, case, prompt, constraint, _) in enumerate(specs) for t in (0.0, 1.0)]
        results = self.run_cases(cases, workers=2)
        self.assert_all_ok(results)
        for (label, _, _, _, want), res in zip(specs, results[0::2]):
            if want is not None:
                print(f"[{self.log_name}] sense {label}: {'matches' if res.get('text') == want else 'got ' + describe(res.get('text'))}",
                      flush=True)

    def test_json_object(self):
        text, finish, _ = self.chat("Describe a cat as a JSON object with the keys name, age and color.",
                                    constraint={"response_format": {"type": "json_object"}}, max_tokens=300)
        self.records.append(dict(label="json_object", temperature=0.0, text=text, finish_reason=finish))
        print(f"[{self.log_name}] json_object T=0: {describe(text)} ({finish})", flush=True)
        self.assertTrue(text.lstrip(" \n\t").startswith("{"), describe(text))
        if finish == "stop":
            ok, why = schema_fuzz.check_json(None, text)
            self.assertTrue(ok, f"{why}: {describe(text)}")

    def test_greedy_equivalence(self):
        prompts = ["What is the capital of France?", "Name three primary colors.", "Say hello in French."]
        qualified = self.greedy_equivalence(prompts, n_tokens=24)
        self.assertGreaterEqual(qualified, 1)


def check_environment(models, modules=("openai", "jsonschema")):
    """None when everything needed is here; else why not."""
    for module in modules:
        try:
            __import__(module)
        except ImportError:
            return f"the {module} package is missing"
    verified = schema_fuzz.verified_formats()
    unverified = [f for f, ok in verified.items() if not ok]
    if unverified:
        return (f"jsonschema does not verify the formats {unverified} here (date-time and time need the "
                "rfc3339-validator package)")
    if "random" in models:
        try:
            import llama_models.llama3.tokenizer  # noqa: F401
        except ImportError:
            return "the llama-models package (Meta's Llama 3 tokenizer) is missing"
    if "smollm2" in models and not os.path.exists(serve_util.smollm2_path()):
        return f"SmolLM2 not found at {serve_util.smollm2_path()} (scripts/setup.sh fetches it)"
    return None


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--models", default="random,smollm2", help="comma-separated: random, smollm2")
    parser.add_argument("--max-tokens", type=int, default=1500)
    parser.add_argument("--http-fuzz", type=int, default=30, help="fuzzed schemas sent over HTTP (random model)")
    parser.add_argument("--workers", type=int, default=4, help="requests in flight at once")
    parser.add_argument("--min-sensible", type=float, default=0.4,
                        help="fraction of SmolLM2's greedy extractions that must hold every expected value")
    ARGS, rest = parser.parse_known_args()
    os.makedirs(ARGS.log_dir, exist_ok=True)
    models = [m.strip() for m in ARGS.models.split(",") if m.strip()]
    ci = os.environ.get("CI") in ("true", "1")
    problem = check_environment(models)
    if problem:
        print(problem)
        return 1 if ci else SKIP_CODE
    suite = load_suite()
    counts = schema_fuzz.keyword_counts([e["schema"] for e in suite])
    print(f"suite: {len(suite)} schemas ({sum(1 for e in suite if e.get('smollm2'))} with SmolLM2 prompts); "
          f"schemas per keyword: {json.dumps(counts)}; formats verified by jsonschema: "
          f"{json.dumps(schema_fuzz.verified_formats())}", flush=True)
    missing = [k for k in REQUIRED_KEYWORDS if k not in counts]
    if len(suite) < 50 or missing:
        print(f"the suite must hold >= 50 schemas covering {missing}")
        return 1
    loader = unittest.TestLoader()
    tests = unittest.TestSuite()
    selected = {"random": RandomLlama3Test, "smollm2": SmolLm2Test}
    for m in models:
        if m not in selected:
            print(f"unknown model {m!r}")
            return 2
    if rest:
        tests = loader.loadTestsFromNames(rest, module=sys.modules[__name__])
    else:
        for m in models:
            tests.addTests(loader.loadTestsFromTestCase(selected[m]))
    result = unittest.TextTestRunner(verbosity=2).run(tests)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
