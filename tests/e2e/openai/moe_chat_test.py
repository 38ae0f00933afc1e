#!/usr/bin/env python3
"""A mixture of experts served end to end: `tessera gen-checkpoint --preset tiny-qwen3-moe`
(Qwen3-MoE: q/k norms, 8 experts, top 2, a dense layer among the sparse ones) under
`tessera serve --tp 2 --expert-parallel`, asked through the OpenAI chat API with the official
`openai` SDK. The greedy answer, streamed and not, must be the one `tessera run` (one
process, every expert in it) gives for the rendered prompt; tensor-parallel experts (no
--expert-parallel) must give it too.

    moe_chat_test.py --tessera BUILD/bin/tessera --log-dir DIR [unittest args]

Exits 77 (skipped) without the `openai` package (requirements-dev.txt).
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
MODEL = None
# No BOS in the template: Qwen tokenizers add none, and the chat path adds nothing else.
TEMPLATE = ("{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
            "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
QUESTION = "Tell me a story about a dragon."
MAX_TOKENS = 16


def setUpModule():
    global MODEL
    root = tempfile.mkdtemp(prefix="tessera-moe-chat-")
    MODEL = os.path.join(root, "tiny-qwen3-moe")
    subprocess.run([ARGS.tessera, "gen-checkpoint", "--preset", "tiny-qwen3-moe", "--dtype", "f32",
                    "--seed", "5", "--out", MODEL], check=True, capture_output=True)
    with open(os.path.join(MODEL, "chat_template.jinja"), "w") as f:
        f.write(TEMPLATE)


def tearDownModule():
    if MODEL is not None:
        shutil.rmtree(os.path.dirname(MODEL), ignore_errors=True)


def reference_text():
    """What one process generates greedily for the rendered chat prompt."""
    out = subprocess.run(
        [ARGS.tessera, "run", "--model", MODEL, "--prompt", f"user: {QUESTION}\nassistant:",
         "--max-tokens", str(MAX_TOKENS), "--temperature", "0", "--threads", "1", "--json", "--quiet"],
        check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["text"]


class MoeChatTest(unittest.TestCase):
    def chat(self, extra):
        import openai
        server = serve_util.Serve(ARGS.tessera, MODEL,
                                  os.path.join(ARGS.log_dir, f"moe_chat_test{'_'.join(extra)}.serve.log"),
                                  extra=("--tp", "2", *extra))
        try:
            server.wait_ready()
            client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=120)
            messages = [{"role": "user", "content": QUESTION}]
            reply = client.chat.completions.create(model="tiny-qwen3-moe", messages=messages,
                                                   max_tokens=MAX_TOKENS, temperature=0)
            streamed = "".join(
                chunk.choices[0].delta.content or ""
                for chunk in client.chat.completions.create(model="tiny-qwen3-moe", messages=messages,
                                                            max_tokens=MAX_TOKENS, temperature=0,
                                                            stream=True)
                if chunk.choices)
            return reply, streamed
        finally:
            server.stop()

    def test_expert_parallel_chat_matches_one_process(self):
        want = reference_text()
        self.assertTrue(want, "the reference generated nothing")
        reply, streamed = self.chat(("--expert-parallel",))
        self.assertEqual(reply.choices[0].message.role, "assistant")
        self.assertEqual(reply.choices[0].message.content, want)
        self.assertEqual(streamed, want)
        self.assertIn(reply.choices[0].finish_reason, ("length", "stop"))
        self.assertGreater(reply.usage.prompt_tokens, 0)
        self.assertLessEqual(reply.usage.completion_tokens, MAX_TOKENS)

    def test_tensor_parallel_experts_chat_matches_one_process(self):
        reply, _ = self.chat(())
        self.assertEqual(reply.choices[0].message.content, reference_text())


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--log-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    try:
        import openai  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            print("the openai package is missing (scripts/setup.sh installs requirements-dev.txt)")
            return 1
        print("skipped: the openai package is missing (requirements-dev.txt)")
        return SKIP_CODE
    result = unittest.main(argv=[sys.argv[0], *rest], exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
