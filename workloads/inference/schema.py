"""The OpenAI-style ``/v1/completions`` request and response, and the 4xx for bad requests.

Every check names the field, the value given and what is allowed; the HTTP layers (the Serve
replica and the FastAPI baselines) turn a ``RequestError`` into its status code and an
OpenAI-shaped error body, so a bad request never becomes a 500 or kills a replica.

One module because it is one contract: every field's check and the error body it produces must be
read next to each other against OpenAI's API reference.
"""

from __future__ import annotations

import codecs
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from workloads.common.model import VOCAB_SIZE, encode

# Bodies larger than this are refused (413) before they are parsed.
MAX_BODY_BYTES = 1 << 20
# OpenAI's documented temperature range.
MAX_TEMPERATURE = 2.0
MAX_SEED = 2**63 - 1

# Every field of OpenAI's completions request (what the official client sends).
FIELDS = (
    "model",
    "prompt",
    "best_of",
    "echo",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "max_tokens",
    "n",
    "presence_penalty",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "suffix",
    "temperature",
    "top_p",
    "user",
)
# OpenAI's documented bounds.
MAX_N = 128
MAX_BEST_OF = 20
MAX_LOGPROBS = 5
MAX_STOP = 4
MAX_PENALTY = 2.0
MAX_LOGIT_BIAS = 100.0
# Sequences one request may generate (prompts x best_of): a CPU replica's batch stays bounded.
MAX_SEQUENCES = 256


class RequestError(Exception):
    """A client error: ``status`` (4xx), the offending ``param`` and a message naming both."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """OpenAI's error body: ``code`` is a string such as ``model_not_found``, or null."""
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class Limits:
    block_size: int  # the model's context length, in tokens (UTF-8 bytes)
    max_tokens_limit: int
    default_max_tokens: int


@dataclass(frozen=True)
class Completion:
    prompt: str  # the first prompt's text
    prompt_ids: list[int]  # the first prompt's token ids
    max_tokens: int
    temperature: float
    seed: int | None
    stream: bool
    prompts: tuple[tuple[int, ...], ...] = ()  # every prompt (a list of prompts gives choices per prompt)
    model: str | None = None
    n: int = 1
    best_of: int = 1
    top_p: float = 1.0
    stop: tuple[bytes, ...] = ()
    logprobs: int | None = None
    echo: bool = False
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    include_usage: bool = False

    @property
    def all_prompts(self) -> tuple[tuple[int, ...], ...]:
        return self.prompts or (tuple(self.prompt_ids),)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_body(raw: bytes) -> dict[str, Any]:
    if len(raw) > MAX_BODY_BYTES:
        raise RequestError(413, f"request body is {len(raw)} bytes; at most {MAX_BODY_BYTES} allowed")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RequestError(400, f"request body is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise RequestError(400, f"request body must be a JSON object; got {type(data).__name__}")
    return data


def _prompts(prompt: Any, limits: Limits) -> list[list[int]]:
    """The prompt forms of the API: a string, strings, token ids, or lists of token ids."""
    if prompt is None:
        raise RequestError(400, "prompt: required; this model has no document-separator token to start from", "prompt")
    single = isinstance(prompt, str) or (isinstance(prompt, list) and bool(prompt) and all(_is_int(t) for t in prompt))
    if single:
        forms: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt:
        forms = prompt
    else:
        raise RequestError(
            400,
            f"prompt: {prompt!r} is not allowed; expected a string, a non-empty array of strings, "
            "an array of token ids or an array of token id arrays",
            "prompt",
        )
    out = []
    for i, form in enumerate(forms):
        where = "prompt" if single else f"prompt[{i}]"
        if isinstance(form, str):
            ids = encode(form)
        elif isinstance(form, list) and all(_is_int(t) for t in form):
            bad = [t for t in form if not 0 <= t < VOCAB_SIZE]
            if bad:
                raise RequestError(
                    400, f"{where}: token id {bad[0]} is out of range; allowed: 0 to {VOCAB_SIZE - 1}", "prompt"
                )
            ids = list(form)
        else:
            raise RequestError(
                400, f"{where}: must be a string or an array of token ids; got {type(form).__name__}", "prompt"
            )
        if not ids:
            raise RequestError(400, f"{where}: must not be empty", "prompt")
        if len(ids) > limits.block_size:
            raise RequestError(
                400,
                f"{where}: {len(ids)} tokens (UTF-8 bytes) is longer than the model's context of "
                f"{limits.block_size} tokens",
                "prompt",
            )
        out.append(ids)
    return out


def _number(data: dict[str, Any], name: str, default: float, low: float, high: float, note: str = "") -> float:
    v = data.get(name)
    if v is None:
        return default
    if not _is_number(v) or not low <= v <= high:
        raise RequestError(
            400, f"{name}: {v!r} is out of bounds; allowed: a number from {low:g} to {high:g}{note}", name
        )
    return float(v)


def _integer(data: dict[str, Any], name: str, default: int | None, low: int, high: int, what: str = "") -> int | None:
    v = data.get(name)
    if v is None:
        return default
    if not _is_int(v) or not low <= v <= high:
        raise RequestError(400, f"{name}: {v!r} is out of bounds; allowed: an integer from {low} to {high}{what}", name)
    value: int = v
    return value


def validate(data: dict[str, Any], limits: Limits, model_ids: tuple[str, ...] | None = None) -> Completion:
    """A ``Completion`` from a decoded JSON body, or the first ``RequestError`` found.

    ``model_ids``: the names this server answers to; another ``model`` is a 404 as in OpenAI's
    API. Without it (the bench's baselines) ``model`` is not checked.
    """
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise RequestError(
            400,
            f"unknown field {unknown[0]!r} (unrecognized request argument); allowed fields: {', '.join(FIELDS)}",
            unknown[0],
        )
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError(400, f"model: must be a string; got {type(model).__name__}", "model")
    if model_ids is not None and model is not None and model not in model_ids:
        raise RequestError(
            404,
            f"The model `{model}` does not exist; this server serves {', '.join(model_ids)} (GET /v1/models)",
            "model",
            "model_not_found",
        )
    if "prompt" not in data:
        raise RequestError(400, "prompt: required field is missing", "prompt")
    prompts = _prompts(data["prompt"], limits)
    max_tokens = _integer(data, "max_tokens", limits.default_max_tokens, 0, limits.max_tokens_limit)
    temperature = _number(data, "temperature", 1.0, 0, MAX_TEMPERATURE, " (0 is greedy)")
    top_p = _number(data, "top_p", 1.0, 0, 1)
    frequency_penalty = _number(data, "frequency_penalty", 0.0, -MAX_PENALTY, MAX_PENALTY)
    presence_penalty = _number(data, "presence_penalty", 0.0, -MAX_PENALTY, MAX_PENALTY)
    seed = data.get("seed")
    if seed is not None and (not _is_int(seed) or not 0 <= seed <= MAX_SEED):
        raise RequestError(400, f"seed: {seed!r} is not allowed; expected an integer from 0 to 2**63-1", "seed")
    stream = data.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise RequestError(400, f"stream: {stream!r} is not a boolean", "stream")
    include_usage = False
    options = data.get("stream_options")
    if options is not None:
        if not stream:
            raise RequestError(400, "stream_options: only allowed when stream is true", "stream_options")
        if not isinstance(options, dict) or set(options) - {"include_usage", "include_obfuscation"}:
            raise RequestError(
                400, f'stream_options: {options!r} is not allowed; expected {{"include_usage": bool}}', "stream_options"
            )
        include_usage = bool(options.get("include_usage"))
    n = _integer(data, "n", 1, 1, MAX_N)
    best_of = _integer(data, "best_of", n, 1, MAX_BEST_OF)
    assert n is not None and best_of is not None and max_tokens is not None
    if best_of < n:
        raise RequestError(400, f"best_of: {best_of} is less than n ({n}); best_of must be at least n", "best_of")
    if stream and best_of > 1 and best_of != n:
        raise RequestError(400, "best_of: results cannot be streamed when best_of is greater than n", "best_of")
    if len(prompts) * best_of > MAX_SEQUENCES:
        raise RequestError(
            400,
            f"n/best_of: {len(prompts)} prompts x {best_of} completions is {len(prompts) * best_of} sequences; "
            f"at most {MAX_SEQUENCES} per request",
            "n",
        )
    logprobs = _integer(data, "logprobs", None, 0, MAX_LOGPROBS)
    echo = data.get("echo")
    if echo is None:
        echo = False
    if not isinstance(echo, bool):
        raise RequestError(400, f"echo: {echo!r} is not a boolean", "echo")
    stop = data.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and len(stop) <= MAX_STOP and all(isinstance(x, str) for x in stop):
        stops = stop
    else:
        raise RequestError(
            400, f"stop: {stop!r} is not allowed; expected a string or an array of up to {MAX_STOP} strings", "stop"
        )
    bias = data.get("logit_bias")
    biases: list[tuple[int, float]] = []
    if bias is not None:
        if not isinstance(bias, dict):
            raise RequestError(400, f"logit_bias: must be an object of token id -> bias; got {bias!r}", "logit_bias")
        for key, value in bias.items():
            if not str(key).isdigit() or not 0 <= int(key) < VOCAB_SIZE:
                raise RequestError(
                    400, f"logit_bias: token id {key!r} is out of range; allowed: 0 to {VOCAB_SIZE - 1}", "logit_bias"
                )
            if not _is_number(value) or not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS:
                raise RequestError(
                    400, f"logit_bias: {value!r} for token {key} is out of bounds; allowed: -100 to 100", "logit_bias"
                )
            biases.append((int(key), float(value)))
    suffix = data.get("suffix")
    if suffix not in (None, ""):
        raise RequestError(400, "suffix: not supported by this model (text insertion)", "suffix")
    user = data.get("user")
    if user is not None and not isinstance(user, str):
        raise RequestError(400, f"user: must be a string; got {type(user).__name__}", "user")
    first = prompts[0]
    return Completion(
        prompt=bytes(first).decode("utf-8", errors="replace"),
        prompt_ids=first,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
        stream=stream,
        prompts=tuple(tuple(p) for p in prompts),
        model=model,
        n=n,
        best_of=best_of,
        top_p=top_p,
        stop=tuple(s.encode() for s in stops if s),
        logprobs=logprobs,
        echo=echo,
        frequency_penalty=frequency_penalty,
        presence_penalty=presence_penalty,
        logit_bias=tuple(biases),
        include_usage=include_usage,
    )


def completion_id() -> str:
    return f"cmpl-{uuid.uuid4().hex[:24]}"


def decode_tokens(ids: list[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")


def response(model_id: str, req: Completion, token_ids: list[int], cid: str | None = None) -> dict[str, Any]:
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

    def _event(self, text: str, token_ids: list[int], finish: str | None, usage: dict[str, Any] | None = None) -> bytes:
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


# The OpenAI contract beyond one plain choice: several prompts and choices, stop sequences,
# logprobs, echo, best_of and streamed choices.


@dataclass
class Generated:
    """One generated sequence of a request, with the log-probabilities the engine recorded."""

    prompt_ids: list[int]
    tokens: list[int]
    token_logprobs: list[float]
    top_logprobs: list[dict[int, float]]
    prompt_logprobs: list[float | None] | None = None  # echo with logprobs
    prompt_top: list[dict[int, float] | None] | None = None


def token_text(tok: int) -> str:
    """A byte-level token as logprobs name it: the character, or ``bytes:\\xNN`` for a byte
    that is not a character on its own (as OpenAI names partial UTF-8 tokens)."""
    return chr(tok) if tok < 0x80 else f"bytes:\\x{tok:02x}"


def cut_at_stop(tokens: list[int], stop: tuple[bytes, ...]) -> tuple[list[int], bool]:
    """The tokens before the first stop sequence (which is left out), and whether one was hit."""
    data = bytes(tokens)
    hits = [i for i in (data.find(s) for s in stop) if i >= 0]
    if not hits:
        return tokens, False
    return tokens[: min(hits)], True


def _logprobs(ids: list[int], chosen: list[Any], tops: list[Any], text_start: int) -> dict[str, Any]:
    offsets, text = [], ""
    for i in range(len(ids)):
        offsets.append(text_start + len(text))
        text = decode_tokens(ids[: i + 1])
    return {
        "tokens": [token_text(t) for t in ids],
        "token_logprobs": chosen,
        "top_logprobs": [None if t is None else {token_text(k): v for k, v in t.items()} for t in tops],
        "text_offset": offsets,
    }


def choice(req: Completion, index: int, out: Generated) -> tuple[dict[str, Any], int]:
    """One choice of a non-streamed response, and the number of completion tokens in it."""
    tokens, stopped = cut_at_stop(out.tokens, req.stop)
    kept = len(tokens)
    ids = (list(out.prompt_ids) if req.echo else []) + tokens
    logprobs = None
    if req.logprobs is not None:
        chosen: list[Any] = out.token_logprobs[:kept]
        tops: list[Any] = out.top_logprobs[:kept]
        if req.echo:
            chosen = list(out.prompt_logprobs or []) + chosen
            tops = list(out.prompt_top or []) + tops
        logprobs = _logprobs(ids, chosen, tops, 0)
    body = {
        "index": index,
        "text": decode_tokens(ids),
        "token_ids": tokens,  # extension (as vLLM's return_token_ids): the generated byte-level ids
        "logprobs": logprobs,
        "finish_reason": "stop" if stopped else "length",
    }
    return body, kept


def mean_logprob(out: Generated, stop: tuple[bytes, ...]) -> float:
    """best_of's ranking: the log-probability per generated token (before the stop sequence)."""
    kept = len(cut_at_stop(out.tokens, stop)[0])
    return sum(out.token_logprobs[:kept]) / kept if kept else 0.0


def completion_body(model_id: str, req: Completion, outputs: list[list[Generated]]) -> dict[str, Any]:
    """The response to a non-streamed request: ``outputs[p]`` are prompt ``p``'s ``best_of``
    sequences; the ``n`` best of each become choices ``p * n ... p * n + n - 1``."""
    choices, completion_tokens = [], 0
    for p, candidates in enumerate(outputs):
        if req.best_of > req.n:
            candidates = sorted(candidates, key=lambda o: mean_logprob(o, req.stop), reverse=True)
        for j, out in enumerate(candidates[: req.n]):
            body, kept = choice(req, p * req.n + j, out)
            choices.append(body)
            completion_tokens += kept
    prompt_tokens = sum(len(p) for p in req.all_prompts)
    return {
        "id": completion_id(),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model_id,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class ChoiceStream:
    """One streamed choice: text is sent as tokens arrive, except bytes that may begin a stop
    sequence (held until it is clear they do not) and bytes of an unfinished UTF-8 character."""

    def __init__(self, req: Completion, index: int, prompt_ids: list[int]):
        self.req = req
        self.index = index
        self.prompt_ids = prompt_ids
        self.tokens: list[int] = []
        self.lps: list[tuple[float, dict[int, float]]] = []
        self.sent = 0
        self.done = False
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text_len = 0

    def _delta(
        self, upto: int, finish: str | None, prefix: tuple[list[int], list[Any], list[Any]] | None = None
    ) -> dict[str, Any]:
        ids = self.tokens[self.sent : upto]
        chosen = [lp for lp, _ in self.lps[self.sent : upto]]
        tops = [top for _, top in self.lps[self.sent : upto]]
        if prefix is not None:
            ids, chosen, tops = prefix[0] + ids, prefix[1] + chosen, prefix[2] + tops
        text = self.decoder.decode(bytes(ids), final=finish is not None)
        logprobs = _logprobs(ids, chosen, tops, self.text_len) if self.req.logprobs is not None else None
        self.text_len += len(text)
        generated = self.tokens[self.sent : upto]
        self.sent = upto
        return {
            "index": self.index,
            "text": text,
            "token_ids": generated,
            "logprobs": logprobs,
            "finish_reason": finish,
        }

    def echo(self, prompt_logprobs: list[Any] | None, prompt_top: list[Any] | None) -> dict[str, Any]:
        """The first delta with ``echo``: the prompt itself."""
        return self._delta(0, None, (list(self.prompt_ids), list(prompt_logprobs or []), list(prompt_top or [])))

    def push(self, tok: int, lp: float | None = None, top: dict[int, float] | None = None) -> dict[str, Any] | None:
        """The delta to send after ``tok``, if any (None while held back or once finished)."""
        if self.done:
            return None
        self.tokens.append(tok)
        self.lps.append((lp if lp is not None else 0.0, top or {}))
        data = bytes(self.tokens)
        hits = [i for i in (data.find(s) for s in self.req.stop) if i >= 0]
        if hits:
            self.done = True
            self.tokens = self.tokens[: min(hits)]
            return self._delta(len(self.tokens), "stop")
        hold = 0
        for s in self.req.stop:
            for k in range(min(len(s) - 1, len(data)), hold, -1):
                if data.endswith(s[:k]):
                    hold = k
                    break
        upto = len(self.tokens) - hold
        return self._delta(upto, None) if upto > self.sent else None

    def finish(self) -> dict[str, Any] | None:
        """The last delta when generation ended at ``max_tokens``."""
        if self.done:
            return None
        self.done = True
        return self._delta(len(self.tokens), "length")

    @property
    def completion_tokens(self) -> int:
        return len(self.tokens)


def stream_chunk(
    cid: str, created: int, model_id: str, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None
) -> bytes:
    chunk = {
        "id": cid,
        "object": "text_completion",
        "created": created,
        "model": model_id,
        "choices": choices,
        "usage": usage,
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"
