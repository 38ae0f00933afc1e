#!/usr/bin/python3
"""A small Python client for Tessera's public gRPC API (tessera.v1.Generation).

Library use::

    from tessera_client import TesseraClient

    with TesseraClient("127.0.0.1:50051") as client:
        client.wait_ready(timeout=60)
        done = client.generate("Once upon a time", max_tokens=32, temperature=0)
        print(done.text, done.token_ids, done.finish_reason)
        for chunk in client.generate_stream("Once upon a time", max_tokens=32):
            print(chunk.text, end="", flush=True)

Command line (an example of the same)::

    /usr/bin/python3 clients/python/tessera_client.py --server 127.0.0.1:50051 \\
        --prompt "Once upon a time" --max-tokens 32 [--stream] [--json]

The module needs grpcio and protobuf (Debian: python3-grpcio, python3-protobuf) and the
generated stubs of proto/tessera/v1/generation.proto. `load_stubs(DIR)` (or --stubs DIR;
default $TESSERA_PY_STUBS or ~/.cache/tessera/python-stubs) imports them from DIR,
generating them there first with generate_stubs.sh when missing or older than the proto.
Errors surface as grpc.RpcError: .code() is the gRPC status (INVALID_ARGUMENT names the
bad field in .details(); UNAVAILABLE when no replica can serve).
"""

import argparse
import dataclasses
import importlib
import json
import os
import subprocess
import sys
import time
from typing import Dict, Iterator, List, Optional, Sequence

import grpc

_HERE = os.path.dirname(os.path.abspath(__file__))
_PROTO = os.path.join(_HERE, "..", "..", "proto", "tessera", "v1", "generation.proto")
DEFAULT_STUBS_DIR = os.environ.get(
    "TESSERA_PY_STUBS", os.path.join(os.path.expanduser("~"), ".cache", "tessera", "python-stubs"))

pb2 = None       # tessera.v1.generation_pb2, set by load_stubs()
pb2_grpc = None  # tessera.v1.generation_pb2_grpc


def load_stubs(stubs_dir: str = DEFAULT_STUBS_DIR) -> None:
    """Imports the generated modules from stubs_dir, generating them first if absent."""
    global pb2, pb2_grpc
    if pb2 is not None:
        return
    generated = os.path.join(stubs_dir, "tessera", "v1", "generation_pb2_grpc.py")
    stale = os.path.exists(generated) and os.path.exists(_PROTO) and \
        os.path.getmtime(_PROTO) > os.path.getmtime(generated)
    if stale or not os.path.exists(generated):
        script = os.path.join(_HERE, "generate_stubs.sh")
        result = subprocess.run([script, stubs_dir], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"cannot generate the Python stubs into {stubs_dir}: {result.stderr.strip()}")
    if stubs_dir not in sys.path:
        sys.path.insert(0, stubs_dir)
    pb2 = importlib.import_module("tessera.v1.generation_pb2")
    pb2_grpc = importlib.import_module("tessera.v1.generation_pb2_grpc")


@dataclasses.dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: List[tuple]  # (token_id, logprob), most likely first


@dataclasses.dataclass
class Completion:
    """The result of generate()."""
    request_id: str
    prompt_ids: List[int]
    token_ids: List[int]
    text: str
    finish_reason: str  # "length", "stop", "eos", "cancelled" or "error"
    usage: Dict[str, int]
    timings: Dict[str, float]
    logprobs: List[TokenLogprob]
    replica: int


@dataclasses.dataclass
class Chunk:
    """One message of generate_stream(): the tokens and text new since the previous one."""
    request_id: str
    token_ids: List[int]
    text: str
    prompt_ids: List[int]        # First chunk only.
    finish_reason: Optional[str]  # Last chunk only.
    usage: Optional[Dict[str, int]]
    logprobs: List[TokenLogprob]


def _finish_name(value: int) -> Optional[str]:
    name = pb2.FinishReason.Name(value)
    return None if name == "FINISH_REASON_UNSPECIFIED" else name[len("FINISH_REASON_"):].lower()


def _logprobs(items) -> List[TokenLogprob]:
    return [TokenLogprob(lp.token_id, lp.logprob, [(t.token_id, t.logprob) for t in lp.top]) for lp in items]


def _usage(u) -> Dict[str, int]:
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "cached_prompt_tokens": u.cached_prompt_tokens}


def _read_varint(data: bytes, pos: int):
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _health_status(data: bytes) -> int:
    """Decodes grpc.health.v1.HealthCheckResponse (field 1, varint status) by hand."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        if key >> 3 == 1 and key & 7 == 0:
            status, pos = _read_varint(data, pos)
            return status
        if key & 7 == 0:
            _, pos = _read_varint(data, pos)
        elif key & 7 == 2:
            length, pos = _read_varint(data, pos)
            pos += length
        else:
            break
    return 0


HEALTH_NAMES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


class TesseraClient:
    """A connection to one Tessera coordinator. Safe to share between threads."""

    def __init__(self, address: str, stubs_dir: str = DEFAULT_STUBS_DIR, timeout: float = 600.0,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None, tls_key: Optional[str] = None):
        """tls_ca: PEM file of the CA to verify the server with (TLS); None: plaintext.
        tls_cert and tls_key: a client certificate, for a server started with --tls-client-ca."""
        load_stubs(stubs_dir)
        self.address = address
        self.timeout = timeout
        if tls_ca is None:
            self._channel = grpc.insecure_channel(address)
        else:
            def read(path):
                with open(path, "rb") as f:
                    return f.read()
            credentials = grpc.ssl_channel_credentials(
                root_certificates=read(tls_ca),
                private_key=read(tls_key) if tls_key else None,
                certificate_chain=read(tls_cert) if tls_cert else None)
            self._channel = grpc.secure_channel(address, credentials)
        self._stub = pb2_grpc.GenerationStub(self._channel)
        # HealthCheckRequest{service=""} encodes as empty bytes.
        self._health = self._channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda _: b"",
            response_deserializer=lambda data: data)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def health(self) -> str:
        """"SERVING" while at least one complete replica serves, else "NOT_SERVING"."""
        return HEALTH_NAMES.get(_health_status(self._health(None, timeout=5)), "UNKNOWN")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Polls health until SERVING; raises TimeoutError with the last state."""
        deadline = time.monotonic() + timeout
        last = "unreachable"
        while time.monotonic() < deadline:
            try:
                last = self.health()
                if last == "SERVING":
                    return
            except grpc.RpcError as e:
                last = f"{e.code().name}: {e.details()}"
            time.sleep(0.1)
        raise TimeoutError(f"{self.address} not SERVING after {timeout} s (last: {last})")

    @staticmethod
    def make_request(prompt: Optional[str] = None, *, prompt_ids: Optional[Sequence[int]] = None,
                     messages: Optional[Sequence[Dict[str, str]]] = None, continue_final_message: bool = False,
                     max_tokens: Optional[int] = None, temperature: Optional[float] = None,
                     top_p: Optional[float] = None, top_k: Optional[int] = None,
                     min_p: Optional[float] = None, seed: Optional[int] = None,
                     stop: Sequence[str] = (), stop_token_ids: Sequence[int] = (),
                     ignore_eos: bool = False, min_tokens: int = 0, logprobs: int = 0,
                     request_id: str = "", priority: int = 0, no_bos: bool = False):
        """Builds a GenerateRequest. Exactly one of prompt / prompt_ids / messages (a chat:
        [{"role": ..., "content": ...}], rendered by the server with the model's chat
        template); unset sampling fields take the server's defaults (temperature 1,
        max_tokens 16)."""
        if sum(x is not None for x in (prompt, prompt_ids, messages)) != 1:
            raise ValueError("pass exactly one of prompt, prompt_ids and messages")
        r = pb2.GenerateRequest(request_id=request_id, logprobs=logprobs, priority=priority, no_bos=no_bos)
        if prompt is not None:
            r.text = prompt
        elif prompt_ids is not None:
            r.token_ids.ids.extend(prompt_ids)
        else:
            for m in messages:
                r.messages.messages.add(role=m["role"], content=m["content"])
            r.messages.continue_final_message = continue_final_message
        for name, value in (("temperature", temperature), ("top_p", top_p), ("top_k", top_k),
                            ("min_p", min_p), ("seed", seed)):
            if value is not None:
                setattr(r.sampling, name, value)
        if max_tokens is not None:
            r.stopping.max_new_tokens = max_tokens
        r.stopping.stop.extend(stop)
        r.stopping.stop_token_ids.extend(stop_token_ids)
        r.stopping.ignore_eos = ignore_eos
        r.stopping.min_new_tokens = min_tokens
        return r

    def generate(self, prompt: Optional[str] = None, timeout: Optional[float] = None, **kwargs) -> Completion:
        """Generates a completion and returns it whole. kwargs: see make_request()."""
        r = self._stub.Generate(self.make_request(prompt, **kwargs), timeout=timeout or self.timeout)
        return Completion(
            request_id=r.request_id, prompt_ids=list(r.prompt_ids), token_ids=list(r.token_ids), text=r.text,
            finish_reason=_finish_name(r.finish_reason), usage=_usage(r.usage),
            timings={"queue_seconds": r.timings.queue_seconds,
                     "time_to_first_token_seconds": r.timings.time_to_first_token_seconds,
                     "total_seconds": r.timings.total_seconds},
            logprobs=_logprobs(r.logprobs), replica=r.replica)

    def generate_stream(self, prompt: Optional[str] = None, timeout: Optional[float] = None,
                        **kwargs) -> Iterator[Chunk]:
        """Yields Chunks as the server produces tokens. Breaking out of the loop (or
        closing the generator) cancels the request on the server."""
        call = self._stub.GenerateStream(self.make_request(prompt, **kwargs), timeout=timeout or self.timeout)
        try:
            for m in call:
                finish = _finish_name(m.finish_reason)
                yield Chunk(request_id=m.request_id, token_ids=list(m.token_ids), text=m.text,
                            prompt_ids=list(m.prompt_ids), finish_reason=finish,
                            usage=_usage(m.usage) if finish else None, logprobs=_logprobs(m.logprobs))
        finally:
            call.cancel()  # A no-op once the stream has ended.

    def tokenize(self, text: str, add_special_tokens: bool = True) -> List[int]:
        r = self._stub.Tokenize(pb2.TokenizeRequest(text=text, add_special_tokens=add_special_tokens),
                                timeout=self.timeout)
        return list(r.token_ids)

    def model_info(self):
        """The served model and KV capacity (a tessera.v1.ModelInfo message)."""
        return self._stub.GetModelInfo(pb2.GetModelInfoRequest(), timeout=self.timeout)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description="Send one request to a Tessera coordinator.")
    p.add_argument("--server", default="127.0.0.1:50051", help="coordinator address host:port")
    p.add_argument("--prompt", help="prompt text")
    p.add_argument("--prompt-ids", help="prompt as comma-separated token ids")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--temperature", type=float, help="0 is greedy; server default 1")
    p.add_argument("--top-p", type=float)
    p.add_argument("--top-k", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--logprobs", type=int, default=0)
    p.add_argument("--stream", action="store_true", help="print text as it arrives")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--wait-ready", type=float, default=0, help="wait this long for SERVING first")
    p.add_argument("--stubs", default=DEFAULT_STUBS_DIR, help="folder of the generated Python stubs")
    p.add_argument("--tls-ca", help="PEM CA file: connect with TLS and verify the server against it")
    p.add_argument("--tls-cert", help="PEM client certificate (mutual TLS)")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    args = p.parse_args(argv)
    if (args.prompt is None) == (args.prompt_ids is None):
        p.error("pass exactly one of --prompt and --prompt-ids")
    request = dict(prompt_ids=[int(x) for x in args.prompt_ids.split(",")] if args.prompt_ids else None,
                   max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                   top_k=args.top_k, seed=args.seed, stop=args.stop, ignore_eos=args.ignore_eos,
                   logprobs=args.logprobs)
    try:
        with TesseraClient(args.server, stubs_dir=args.stubs, tls_ca=args.tls_ca, tls_cert=args.tls_cert,
                           tls_key=args.tls_key) as client:
            if args.wait_ready > 0:
                client.wait_ready(args.wait_ready)
            if args.stream:
                ids, text, prompt_ids, last = [], "", [], None
                for chunk in client.generate_stream(args.prompt, **request):
                    prompt_ids = prompt_ids or chunk.prompt_ids
                    ids += chunk.token_ids
                    text += chunk.text
                    last = chunk
                    if not args.json:
                        print(chunk.text, end="", flush=True)
                result = {"prompt_ids": prompt_ids, "generated_ids": ids, "text": text,
                          "finish_reason": last.finish_reason if last else None,
                          "usage": last.usage if last else None}
            else:
                done = client.generate(args.prompt, **request)
                text = done.text
                result = {"prompt_ids": done.prompt_ids, "generated_ids": done.token_ids, "text": done.text,
                          "finish_reason": done.finish_reason, "usage": done.usage, "timings": done.timings}
                if not args.json:
                    print(text, end="")
    except grpc.RpcError as e:
        print(f"tessera_client: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    except (TimeoutError, RuntimeError) as e:
        print(f"tessera_client: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result) if args.json else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
