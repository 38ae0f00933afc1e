#!/usr/bin/env python3
"""Renders the chat templates in testdata/ with jinja2 exactly as Hugging Face does.

Writes testdata/expected.json: for every template and message set, the messages, the
options and either jinja2's output or the error a template raised. The C++ test
(chat_template_reference_test) renders the same cases with Tessera's engine and asserts
byte-for-byte equality.

  python3 tests/chat_template/render_reference.py          # regenerate expected.json
  python3 tests/chat_template/render_reference.py --check  # fail if it is stale

Hugging Face (transformers.utils.chat_template_utils) renders with
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]),
its own tojson filter and the raise_exception and strftime_now globals; the clock is fixed
here so the Llama 3.2 "Today Date" is reproducible.
"""
import argparse
import datetime
import json
import os
import sys

try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:  # ctest reads 77 as skipped: pip install -r requirements-dev.txt
    print("jinja2 is not installed (requirements-dev.txt)", file=sys.stderr)
    # In CI (CI=true) a missing reference is a failure, never a silent skip.
    sys.exit(1 if os.environ.get("CI") == "true" else 77)

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "testdata")
EXPECTED = os.path.join(TESTDATA, "expected.json")
FIXED_NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)  # The C++ test uses 2024-07-26 12:00 in TZ=UTC.

TEMPLATES = {
    "llama-3.1-instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.2-instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5-instruct.jinja": ("", "<|im_end|>"),
    "mistral-instruct-v0.3.jinja": ("<s>", "</s>"),
    "features.jinja": ("<s>", "</s>"),
}


def m(role, content):
    return {"role": role, "content": content}


MESSAGE_SETS = {
    "user_only": [m("user", "Hello!")],
    "system_user": [m("system", "You are a helpful assistant."), m("user", "What is 2+2?")],
    "multi_turn": [
        m("system", "Answer briefly."),
        m("user", "Hi"),
        m("assistant", "Hello! How can I help?"),
        m("user", "Tell me a joke."),
        m("assistant", "Why did the chicken cross the road?"),
        m("user", "Why?"),
    ],
    "no_system_multi_turn": [
        m("user", "one"),
        m("assistant", "two"),
        m("user", "three"),
    ],
    "empty_content": [m("system", ""), m("user", ""), m("assistant", ""), m("user", "")],
    "unicode": [
        m("system", "  Réponds en français, s'il te plaît.\n"),
        m("user", "\u3000 你好，世界！🌍🚀 こんにちは \t\n"),
        m("assistant", "👋 Здравствуйте! Ça va? ½ ∑ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"),
        m("user", "emoji ZWJ: 👩‍💻 flags: 🇯🇵 \u00a0"),
    ],
    "tricky_text": [
        m("user", "{{ not a tag }} {% neither %} {# nor #} \"quotes\" 'single' back\\slash\nnew\r\nlines\ttab"),
    ],
    "system_only": [m("system", "Only a system prompt.")],
    "no_messages": [],
    "roles_not_alternating": [m("user", "first"), m("user", "second")],
    "tool_result": [m("user", "Weather?"), m("tool", "{\"temp\": 21}")],
    "assistant_prefill": [m("user", "Write a haiku."), m("assistant", "  Autumn moon rises \n")],
}

# Tool calling, as the HTTP API hands it to templates: `tools` as the client sent them, an
# assistant's tool_calls with function.arguments parsed from its JSON string (vLLM and
# Hugging Face templates expect a dict), a tool result's tool_call_id and name. Ids are 9
# characters, which the Mistral template insists on. Key order matters to tojson, so these
# are stored in expected.json as JSON text (the file's own keys are sorted).
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "Local time in a time zone (für Zürich too).",
                 "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}},
}
TOOL_SETS = {
    "weather": [WEATHER_TOOL],
    "weather_and_time": [WEATHER_TOOL, TIME_TOOL],
}


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant_calls(*calls, content=""):
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def tool_result(call_id, name, content):
    return {"role": "tool", "content": content, "tool_call_id": call_id, "name": name}


TOOL_MESSAGE_SETS = {
    "tools_offered": [m("system", "You are a helpful assistant."), m("user", "What's the weather in Paris?")],
    "tool_call_round_trip": [
        m("user", "What's the weather in Paris?"),
        assistant_calls(call("aB3dE5gH7", "get_weather", {"city": "Paris", "unit": "celsius"})),
        tool_result("aB3dE5gH7", "get_weather", "{\"temperature\": 21, \"sky\": \"clear\"}"),
    ],
    "tool_call_answered": [
        m("system", "Be brief."),
        m("user", "Weather in Zürich?"),
        assistant_calls(call("zZ9yY8xX7", "get_weather", {"city": "Zürich", "nested": {"a": [1, 2.5, None, True]}})),
        tool_result("zZ9yY8xX7", "get_weather", "sunny, 24°C"),
        m("assistant", "Sunny and 24°C."),
        m("user", "And the time?"),
    ],
    "parallel_tool_calls": [
        m("user", "Weather and time in Paris?"),
        assistant_calls(call("aaaaaaaa1", "get_weather", {"city": "Paris"}),
                        call("bbbbbbbb2", "get_time", {"zone": "Europe/Paris"}), content="Checking both."),
        tool_result("aaaaaaaa1", "get_weather", "rain"),
        tool_result("bbbbbbbb2", "get_time", "14:05"),
    ],
}
# (message set, tool set or None) rendered with every template.
TOOL_CASES = [
    ("tools_offered", "weather"),
    ("tools_offered", "weather_and_time"),
    ("tool_call_round_trip", "weather"),
    ("tool_call_round_trip", None),
    ("tool_call_answered", "weather_and_time"),
    ("parallel_tool_calls", "weather_and_time"),
]

# Message sets also rendered with continue_final_message (their last turn is the assistant's).
CONTINUE_SETS = ("assistant_prefill", "multi_turn")


def continue_final_message(rendered, final_message):
    """transformers' apply_chat_template post-processing for continue_final_message=True."""
    if final_message.strip() not in rendered:
        raise jinja2.exceptions.TemplateError(
            "continue_final_message is set but the final message does not appear in the prompt")
    final_msg_loc = rendered.rindex(final_message.strip())
    if rendered[final_msg_loc: final_msg_loc + len(final_message.lstrip())] == final_message:
        return rendered[: final_msg_loc + len(final_message.lstrip())]
    return rendered[: final_msg_loc + len(final_message.strip())]


def hf_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_all():
    env = hf_environment()
    cases = []
    for name, (bos, eos) in TEMPLATES.items():
        with open(os.path.join(TESTDATA, name), encoding="utf-8") as f:
            source = f.read()
        template = env.from_string(source)
        for set_name, messages in MESSAGE_SETS.items():
            modes = [(True, False), (False, False)]
            if set_name in CONTINUE_SETS:
                modes.append((False, True))
            for add_generation_prompt, continue_final in modes:
                case = {
                    "template": name,
                    "messages": set_name,
                    "add_generation_prompt": add_generation_prompt,
                    "continue_final_message": continue_final,
                    "bos_token": bos,
                    "eos_token": eos,
                }
                kwargs = {"messages": messages, "tools": None, "documents": None,
                          "add_generation_prompt": add_generation_prompt, "eos_token": eos}
                if bos:  # Qwen2.5 has no bos_token; Hugging Face then leaves it undefined.
                    kwargs["bos_token"] = bos
                try:
                    case["output"] = template.render(**kwargs)
                    if continue_final:
                        case["output"] = continue_final_message(case["output"], messages[-1]["content"])
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
                    # raise_exception raises TemplateError itself; the engine's own errors
                    # (UndefinedError, ...) are subclasses whose wording Tessera need not copy.
                    case["raised"] = type(e) is jinja2.exceptions.TemplateError
                cases.append(case)
        for set_name, tool_set in TOOL_CASES:
            for add_generation_prompt in (True, False):
                case = {
                    "template": name,
                    "messages": set_name,
                    "tools": tool_set,
                    "add_generation_prompt": add_generation_prompt,
                    "continue_final_message": False,
                    "bos_token": bos,
                    "eos_token": eos,
                }
                kwargs = {"messages": TOOL_MESSAGE_SETS[set_name],
                          "tools": TOOL_SETS[tool_set] if tool_set else None, "documents": None,
                          "add_generation_prompt": add_generation_prompt, "eos_token": eos}
                if bos:
                    kwargs["bos_token"] = bos
                try:
                    case["output"] = template.render(**kwargs)
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
                    case["raised"] = type(e) is jinja2.exceptions.TemplateError
                cases.append(case)
    # Small templates aimed at the engine's corners (whitespace control above all),
    # rendered over the multi-turn conversation.
    with open(os.path.join(TESTDATA, "snippets.json"), encoding="utf-8") as f:
        snippets = json.load(f)
    snippet_cases = []
    for source in snippets:
        case = {"source": source}
        try:
            case["output"] = env.from_string(source).render(
                messages=MESSAGE_SETS["multi_turn"], tools=None, documents=None, add_generation_prompt=True,
                bos_token="<s>", eos_token="</s>")
        except jinja2.exceptions.TemplateError as e:
            case["error"] = str(e)
            case["raised"] = type(e) is jinja2.exceptions.TemplateError
        snippet_cases.append(case)
    return {
        "jinja2_version": jinja2.__version__,
        "message_sets": MESSAGE_SETS,
        "tool_message_sets": {k: json.dumps(v, ensure_ascii=False) for k, v in TOOL_MESSAGE_SETS.items()},
        "tool_sets": {k: json.dumps(v, ensure_ascii=False) for k, v in TOOL_SETS.items()},
        "cases": cases,
        "snippets": snippet_cases,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if expected.json differs from a fresh render")
    args = parser.parse_args()
    text = json.dumps(render_all(), ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    if args.check:
        with open(EXPECTED, encoding="utf-8") as f:
            current = f.read()
        if current != text:
            print("expected.json is stale: rerun tests/chat_template/render_reference.py", file=sys.stderr)
            return 1
        print("expected.json matches jinja2", jinja2.__version__)
        return 0
    with open(EXPECTED, "w", encoding="utf-8") as f:
        f.write(text)
    print("wrote", EXPECTED)
    return 0


if __name__ == "__main__":
    sys.exit(main())
