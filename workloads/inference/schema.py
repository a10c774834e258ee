"""The OpenAI-style ``/v1/completions`` request and response, and the 4xx for bad requests.

Every check names the field, the value given and what is allowed; the HTTP layers (the Serve
replica and the FastAPI baselines) turn a ``RequestError`` into its status code and an
OpenAI-shaped error body, so a bad request never becomes a 500 or kills a replica.
"""

from __future__ import annotations

import codecs
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from workloads.common.model import encode

# Bodies larger than this are refused (413) before they are parsed.
MAX_BODY_BYTES = 1 << 20
# OpenAI's documented temperature range.
MAX_TEMPERATURE = 2.0
MAX_SEED = 2**63 - 1

# Fields we act on, and OpenAI fields we accept only at the value we implement.
FIELDS = ("prompt", "max_tokens", "temperature", "seed", "stream", "model", "n", "user")


class RequestError(Exception):
    """A client error: ``status`` (4xx), the offending ``param`` and a message naming both."""

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}


@dataclass(frozen=True)
class Limits:
    block_size: int  # the model's context length, in tokens (UTF-8 bytes)
    max_tokens_limit: int
    default_max_tokens: int


@dataclass(frozen=True)
class Completion:
    prompt: str
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    seed: int | None
    stream: bool


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_body(raw: bytes) -> dict:
    if len(raw) > MAX_BODY_BYTES:
        raise RequestError(413, f"request body is {len(raw)} bytes; at most {MAX_BODY_BYTES} allowed")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RequestError(400, f"request body is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise RequestError(400, f"request body must be a JSON object; got {type(data).__name__}")
    return data


def validate(data: dict, limits: Limits) -> Completion:
    """A ``Completion`` from a decoded JSON body, or the first ``RequestError`` found."""
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise RequestError(400, f"unknown field {unknown[0]!r}; allowed fields: {', '.join(FIELDS)}", unknown[0])
    if "prompt" not in data:
        raise RequestError(400, "prompt: required field is missing", "prompt")
    prompt = data["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise RequestError(400, f"prompt: must be a string; got {type(prompt).__name__}", "prompt")
    prompt_ids = encode(prompt)
    if not prompt_ids:
        raise RequestError(400, "prompt: must not be empty", "prompt")
    if len(prompt_ids) > limits.block_size:
        raise RequestError(
            400,
            f"prompt: {len(prompt_ids)} tokens (UTF-8 bytes) is longer than the model's context of "
            f"{limits.block_size} tokens",
            "prompt",
        )
    max_tokens = data.get("max_tokens", limits.default_max_tokens)
    if max_tokens is None:
        max_tokens = limits.default_max_tokens
    if not _is_int(max_tokens) or not 1 <= max_tokens <= limits.max_tokens_limit:
        raise RequestError(
            400,
            f"max_tokens: {max_tokens!r} is out of bounds; allowed: an integer from 1 to {limits.max_tokens_limit}",
            "max_tokens",
        )
    temperature = data.get("temperature", 1.0)
    if temperature is None:
        temperature = 1.0
    if (
        not isinstance(temperature, (int, float))
        or isinstance(temperature, bool)
        or not 0 <= temperature <= MAX_TEMPERATURE
    ):
        raise RequestError(
            400,
            f"temperature: {temperature!r} is out of bounds; allowed: a number from 0 to "
            f"{MAX_TEMPERATURE:g} (0 is greedy)",
            "temperature",
        )
    seed = data.get("seed")
    if seed is not None and (not _is_int(seed) or not 0 <= seed <= MAX_SEED):
        raise RequestError(400, f"seed: {seed!r} is not allowed; expected an integer from 0 to 2**63-1", "seed")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(400, f"stream: {stream!r} is not a boolean", "stream")
    n = data.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise RequestError(400, f"n: {n!r} is not supported; only n=1", "n")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError(400, f"model: must be a string; got {type(model).__name__}", "model")
    return Completion(
        prompt=prompt,
        prompt_ids=prompt_ids,
        max_tokens=max_tokens,
        temperature=float(temperature),
        seed=seed,
        stream=stream,
    )


def completion_id() -> str:
    return f"cmpl-{uuid.uuid4().hex[:24]}"


def decode_tokens(ids: list[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")


def response(model_id: str, req: Completion, token_ids: list[int], cid: str | None = None) -> dict:
    return {
        "id": cid or completion_id(),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model_id,
        "choices": [
            {
                "index": 0,
                "text": decode_tokens(token_ids),
                # Extension (as vLLM's return_token_ids): the byte-level token ids generated.
                "token_ids": token_ids,
                "logprobs": None,
                "finish_reason": "length",
            }
        ],
        "usage": {
            "prompt_tokens": len(req.prompt_ids),
            "completion_tokens": len(token_ids),
            "total_tokens": len(req.prompt_ids) + len(token_ids),
        },
    }


class StreamEncoder:
    """Server-sent events for ``stream: true``: one chunk per token, then ``data: [DONE]``.

    Bytes of a multi-byte UTF-8 character are held until the character is complete, so the
    concatenated chunk texts equal the non-streamed text.
    """

    def __init__(self, model_id: str, req: Completion):
        self.model_id = model_id
        self.req = req
        self.cid = completion_id()
        self.created = int(time.time())
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.count = 0

    def _event(self, text: str, token_ids: list[int], finish: str | None, usage: dict | None = None) -> bytes:
        chunk = {
            "id": self.cid,
            "object": "text_completion",
            "created": self.created,
            "model": self.model_id,
            "choices": [{"index": 0, "text": text, "token_ids": token_ids, "logprobs": None, "finish_reason": finish}],
        }
        if usage is not None:
            chunk["usage"] = usage
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    def token(self, tok: int) -> bytes:
        self.count += 1
        return self._event(self.decoder.decode(bytes([tok])), [tok], None)

    def finish(self) -> bytes:
        usage = {
            "prompt_tokens": len(self.req.prompt_ids),
            "completion_tokens": self.count,
            "total_tokens": len(self.req.prompt_ids) + self.count,
        }
        tail = self.decoder.decode(b"", final=True)
        return self._event(tail, [], "length", usage) + b"data: [DONE]\n\n"
