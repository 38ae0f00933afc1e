#!/usr/bin/env python3
"""Tool calling end to end through the official `openai` SDK and `tessera serve`, for the
three tool-call formats, each on a random-weight checkpoint with its family's tokenizer and
real chat template (tests/chat_template/testdata/):

* llama3.1: `gen-checkpoint --preset llama3.1-8b` cut to 2 layers, hidden 64 (Llama 3
  tokenizer, 128k vocabulary), llama-3.1-instruct.jinja: {"name": ..., "parameters": ...};
* qwen2.5: `--preset qwen2.5-7b` with the same cuts (Qwen2.5 tokenizer, whose <tool_call>
  is an added, non-special token), qwen2.5-instruct.jinja: <tool_call>...</tool_call>;
* mistral: `--preset tiny-mistral` (a 301-piece SentencePiece vocabulary without a
  [TOOL_CALLS] token, so the format is plain text), mistral-instruct-v0.3.jinja.

With tool_choice "required" (parallel_tool_calls false) or a named function, the output
is held by a grammar to the family's format and the function's parameter schema, so every
answer, non-streamed and streamed, at temperature 0 and 1, must come back as tool_calls
whose arguments are JSON that validates (the `jsonschema` package) against the tool's
parameters, with finish_reason "tool_calls". The schemas bound every string (maxLength,
enum) and forbid additional properties, so that a random model's call ends within
max_tokens. Also: streamed calls equal unary ones at temperature 0; a conversation
carrying earlier calls and their results (OpenAI-style ids, which Mistral's template
needs cut to 9 characters) renders; "required" with parallel calls gives only valid
calls; "none" and "auto" answer with content; a tool_choice naming no tool is a 400.

    tool_calling_test.py --tessera BUILD/bin/tessera --log-dir DIR [--families llama3.1,qwen2.5,mistral]
                         [unittest args]

Exits 77 (skipped) without the `openai` or `jsonschema` packages, except under CI=true.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util  # noqa: E402

SKIP_CODE = 77
ARGS = None
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
TEMPLATES = os.path.join(REPO, "tests", "chat_template", "testdata")

SMALL = ["--layers", "2", "--hidden", "64", "--intermediate", "128", "--heads", "4", "--kv-heads", "2",
         "--head-dim", "16"]
FAMILIES = {
    "llama3.1": {"preset": "llama3.1-8b", "overrides": SMALL, "template": "llama-3.1-instruct.jinja",
                 "max_tokens": 600},
    "qwen2.5": {"preset": "qwen2.5-7b", "overrides": SMALL, "template": "qwen2.5-instruct.jinja",
                "max_tokens": 600},
    # Its 301 pieces spell the prompt with both tools in about 800 tokens, so the context
    # (1,024 in the preset) is widened in config.json.
    "mistral": {"preset": "tiny-mistral", "overrides": [], "template": "mistral-instruct-v0.3.jinja",
                "max_tokens": 400, "context": 4096},
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "days", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "enum": ["UTC", "CET", "PST"]}, "h24": {"type": "boolean"}},
            "required": ["zone", "h24"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTION = [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}]


def make_checkpoint(family, root):
    spec = FAMILIES[family]
    out = os.path.join(root, family)
    subprocess.run([ARGS.tessera, "gen-checkpoint", "--preset", spec["preset"], *spec["overrides"], "--seed", "3",
                    "--out", out], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    shutil.copyfile(os.path.join(TEMPLATES, spec["template"]), os.path.join(out, "chat_template.jinja"))
    if "context" in spec:
        with open(os.path.join(out, "config.json")) as f:
            config = json.load(f)
        config["max_position_embeddings"] = spec["context"]
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
    return out


class ToolCallingMixin:
    """Tests for one family; subclasses name FAMILY."""

    FAMILY = None
    server = None
    root = None
    model_name = None

    @classmethod
    def setUpClass(cls):
        if cls.FAMILY not in ARGS.families:
            raise unittest.SkipTest(f"{cls.FAMILY} not in --families")
        cls.root = tempfile.mkdtemp(prefix=f"tessera-tools-{cls.FAMILY}-")
        model = make_checkpoint(cls.FAMILY, cls.root)
        cls.server = serve_util.Serve(ARGS.tessera, model,
                                      os.path.join(ARGS.log_dir, f"tool_calling_{cls.FAMILY}.serve.log"))
        try:
            cls.server.wait_ready(timeout=300)
            import openai
            cls.model_name = openai.OpenAI(base_url=cls.server.base + "/v1", api_key="unused").models.list().data[0].id
        except BaseException:
            cls.server.stop()
            shutil.rmtree(cls.root, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.stop()
        if cls.root is not None:
            shutil.rmtree(cls.root, ignore_errors=True)

    def client(self):
        import openai
        return openai.OpenAI(base_url=self.server.base + "/v1", api_key="unused", max_retries=0, timeout=300)

    def request(self, **extra):
        kwargs = dict(model=self.model_name, messages=QUESTION, tools=TOOLS,
                      max_tokens=FAMILIES[self.FAMILY]["max_tokens"], temperature=0)
        kwargs.update(extra)
        return kwargs

    def unary(self, **extra):
        """(calls as [(id, name, arguments text)], finish_reason, content) of one response."""
        r = self.client().chat.completions.create(**self.request(**extra))
        choice = r.choices[0]
        calls = [(c.id, c.function.name, c.function.arguments) for c in (choice.message.tool_calls or [])]
        for c in choice.message.tool_calls or []:
            self.assertEqual(c.type, "function")
        return calls, choice.finish_reason, choice.message.content

    def streamed(self, **extra):
        """The same from a stream, the calls put together from their deltas as clients do."""
        calls = {}
        finish = None
        content = ""
        for chunk in self.client().chat.completions.create(stream=True, **self.request(**extra)):
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            content += choice.delta.content or ""
            for d in choice.delta.tool_calls or []:
                if d.index not in calls:
                    # The first delta of a call names it.
                    self.assertTrue(d.id, f"first delta of call {d.index} has no id: {d}")
                    self.assertEqual(d.type, "function")
                    self.assertTrue(d.function and d.function.name, d)
                    calls[d.index] = [d.id, d.function.name, ""]
                if d.function and d.function.arguments:
                    calls[d.index][2] += d.function.arguments
            if choice.finish_reason is not None:
                self.assertIsNone(finish, "two chunks with a finish_reason")
                finish = choice.finish_reason
        self.assertEqual(sorted(calls), list(range(len(calls))), "call indices are 0, 1, ...")
        return [tuple(calls[i]) for i in sorted(calls)], finish, content

    def check_calls(self, calls, finish, content, allowed, exactly_one=True):
        import jsonschema
        where = f"{self.FAMILY}: finish_reason={finish} content={content!r} calls={calls}"
        self.assertEqual(finish, "tool_calls", where)
        self.assertTrue(calls, where)
        if exactly_one:
            self.assertEqual(len(calls), 1, where)
        for call_id, name, arguments in calls:
            self.assertIn(name, allowed, where)
            self.assertTrue(call_id, where)
            if self.FAMILY == "mistral":
                self.assertRegex(call_id, r"^[A-Za-z0-9]{9}$", where)
            args = json.loads(arguments)
            jsonschema.Draft202012Validator(SCHEMAS[name]).validate(args)
        self.assertEqual(len({c[0] for c in calls}), len(calls), f"ids repeat: {where}")

    def test_named_function(self):
        named = {"type": "function", "function": {"name": "get_weather"}}
        for temperature, seed in ((0, None), (1, 11), (1, 12)):
            extra = dict(tool_choice=named, temperature=temperature)
            if seed is not None:
                extra["seed"] = seed
            with self.subTest(temperature=temperature, seed=seed):
                unary = self.unary(**extra)
                self.check_calls(*unary, allowed={"get_weather"})
                streamed = self.streamed(**extra)
                self.check_calls(*streamed, allowed={"get_weather"})
                if temperature == 0:
                    # Greedy: the stream says the same, ids apart.
                    self.assertEqual([c[1:] for c in streamed[0]], [c[1:] for c in unary[0]])

    def test_named_second_function(self):
        named = {"type": "function", "function": {"name": "get_time"}}
        self.check_calls(*self.unary(tool_choice=named), allowed={"get_time"})
        self.check_calls(*self.streamed(tool_choice=named, temperature=1, seed=5), allowed={"get_time"})

    def test_required(self):
        for temperature, seed in ((0, None), (1, 21), (1, 22)):
            extra = dict(tool_choice="required", parallel_tool_calls=False, temperature=temperature)
            if seed is not None:
                extra["seed"] = seed
            with self.subTest(temperature=temperature, seed=seed):
                self.check_calls(*self.unary(**extra), allowed=set(SCHEMAS))
                self.check_calls(*self.streamed(**extra), allowed=set(SCHEMAS))

    def test_required_parallel(self):
        # Any number of calls; a random model may go on calling until max_tokens, and a cut
        # output is content. Whatever comes back as calls is valid.
        for stream in (False, True):
            calls, finish, content = (self.streamed if stream else self.unary)(
                tool_choice="required", temperature=1, seed=31)
            if finish == "length":
                self.assertFalse(calls)
                continue
            self.check_calls(calls, finish, content, allowed=set(SCHEMAS), exactly_one=False)

    def test_conversation_with_earlier_calls(self):
        calls, _, _ = self.unary(tool_choice={"type": "function", "function": {"name": "get_weather"}})
        self.assertEqual(len(calls), 1)
        call_id, name, arguments = calls[0]
        messages = QUESTION + [
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "{\"forecast\": \"sunny\"}"},
            {"role": "assistant", "content": "Sunny for three days."},
            {"role": "user", "content": "And the time there?"},
        ]
        self.check_calls(*self.unary(messages=messages, tool_choice={"type": "function", "function": {"name": "get_time"}}),
                         allowed={"get_time"})
        # An OpenAI-style id (longer than Mistral's 9 characters) is accepted too.
        messages[1]["tool_calls"][0]["id"] = messages[2]["tool_call_id"] = "call_Ab3De5Gh7Jk9Mn1Pq3"
        self.check_calls(*self.streamed(messages=messages, tool_choice="required", parallel_tool_calls=False),
                         allowed=set(SCHEMAS))

    def test_none_and_auto_answer_with_content(self):
        for choice in ("none", "auto"):
            for stream in (False, True):
                with self.subTest(tool_choice=choice, stream=stream):
                    calls, finish, content = (self.streamed if stream else self.unary)(tool_choice=choice,
                                                                                       max_tokens=12)
                    if choice == "none":
                        self.assertFalse(calls)
                    if not calls:
                        self.assertIn(finish, ("stop", "length"))
                        self.assertIsInstance(content, str)
                    else:  # A random model that happens to write a valid call.
                        self.assertEqual(finish, "tool_calls")

    def test_bad_tool_choice_is_400(self):
        import openai
        with self.assertRaises(openai.BadRequestError) as caught:
            self.unary(tool_choice={"type": "function", "function": {"name": "nope"}})
        self.assertEqual(caught.exception.body.get("param"), "tool_choice")
        with self.assertRaises(openai.BadRequestError) as caught:
            self.unary(tool_choice="required", response_format={"type": "json_object"})
        self.assertEqual(caught.exception.body.get("param"), "tool_choice")


class Llama31Test(ToolCallingMixin, unittest.TestCase):
    FAMILY = "llama3.1"


class Qwen25Test(ToolCallingMixin, unittest.TestCase):
    FAMILY = "qwen2.5"


class MistralTest(ToolCallingMixin, unittest.TestCase):
    FAMILY = "mistral"


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--log-dir", default=tempfile.gettempdir())
    parser.add_argument("--families", default=",".join(FAMILIES))
    ARGS, rest = parser.parse_known_args()
    ARGS.families = set(ARGS.families.split(","))
    try:
        import jsonschema  # noqa: F401
        import openai  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e} (requirements-dev.txt)", file=sys.stderr)
        return 1 if os.environ.get("CI") == "true" else SKIP_CODE
    os.makedirs(ARGS.log_dir, exist_ok=True)
    result = unittest.main(argv=[sys.argv[0]] + rest, exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
