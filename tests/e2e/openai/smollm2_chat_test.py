#!/usr/bin/env python3
"""A real trained chat model over the OpenAI API: SmolLM2-135M-Instruct served by
`tessera serve --model FILE.gguf` straight from its Q4_1 GGUF (chat template, tokenizer and
weights all read from the file), asked with the official `openai` SDK for the capital of
France. The answer, streamed and not, must say Paris and end the assistant's turn.

    smollm2_chat_test.py --tessera BUILD/bin/tessera --log-dir DIR [unittest args]

The GGUF comes from scripts/setup.sh ($TESSERA_SMOLLM2_GGUF overrides). Exits 77 (skipped)
without it or without the `openai` package, except under CI=true, where both must exist.
"""

import argparse
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util  # noqa: E402

SKIP_CODE = 77
ARGS = None


class SmolLm2ChatTest(unittest.TestCase):
    def test_capital_of_france(self):
        import openai
        server = serve_util.Serve(ARGS.tessera, serve_util.smollm2_path(),
                                  os.path.join(ARGS.log_dir, "smollm2_chat_test.serve.log"))
        try:
            server.wait_ready()
            client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=120)
            messages = [{"role": "user", "content": "What is the capital of France?"}]
            model = client.models.list().data[0].id
            self.assertEqual(model, "SmolLM2-135M-Instruct.Q4_1.gguf")  # The file name, as a folder gives its name.
            reply = client.chat.completions.create(model=model, messages=messages, max_tokens=64,
                                                   temperature=0)
            streamed = "".join(
                chunk.choices[0].delta.content or ""
                for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=64,
                                                            temperature=0, stream=True)
                if chunk.choices)
        finally:
            server.stop()
        answer = reply.choices[0].message.content
        self.assertIn("Paris", answer)
        self.assertEqual(reply.choices[0].finish_reason, "stop", answer)
        self.assertNotIn("<|im_end|>", answer)
        self.assertEqual(streamed, answer)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--log-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    ci = os.environ.get("CI") in ("true", "1")
    try:
        import openai  # noqa: F401
    except ImportError:
        print("the openai package is missing (scripts/setup.sh installs requirements-dev.txt)")
        return 1 if ci else SKIP_CODE
    if not os.path.exists(serve_util.smollm2_path()):
        print(f"SmolLM2 not found at {serve_util.smollm2_path()} (scripts/setup.sh fetches it)")
        return 1 if ci else SKIP_CODE
    result = unittest.main(argv=[sys.argv[0], *rest], exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
