"""The Generate app over real Ray Serve HTTP on 127.0.0.1 (one shared deployment)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import pytest

RUN = "tiny-run"

pytestmark = pytest.mark.slow


def _direct(storage, prompt: str, max_tokens: int, temperature: float, seed: int) -> list[int]:
    import torch

    from workloads.common.model import encode
    from workloads.inference.loading import load_model

    torch.set_num_threads(1)  # as in the replica: same kernels, same floating-point results
    model = load_model(str(storage), RUN).model
    idx = torch.tensor([encode(prompt)])
    gen = torch.Generator().manual_seed(seed)
    out = model.generate(idx, max_tokens, temperature=temperature, generator=gen)
    return out[0, idx.shape[1] :].tolist()


def _complete(url, **body):
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_haproxy_is_the_ingress(serve_app):
    """As on the cluster (inference.high_throughput): HAProxy, started by this cluster, owns the
    serve port, and the replicas answer it directly."""
    from rigs import serve_local as local

    url, _, cluster = serve_app
    port = int(url.rsplit(":", 1)[1])
    # Serve reloads HAProxy gracefully (a new process with -sf takes the listener over and the old
    # one drains, then exits), so for a moment the socket's holder can be a process on its way
    # out, with no command line left. Ask again until a live process answers.
    deadline = time.monotonic() + 30
    while True:
        owner = local.listener_pid(port)
        command = local.cmdline(owner) if owner else ""
        if command or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    ours = {pid for node in cluster.nodes for pid in cluster.worker_processes(node)}
    assert owner in ours, (owner, command)
    assert command.split()[0].endswith("/haproxy"), (owner, command)
    assert _complete(url, prompt="via haproxy", max_tokens=2)["usage"]["completion_tokens"] == 2


def test_torn_newest_checkpoint_falls_back_and_says_so(serve_app):
    url, _, _ = serve_app
    info = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]
    assert info["id"] == f"{RUN}@step-10"
    assert info["checkpoint"].endswith("checkpoint_000000010")
    assert len(info["skipped_checkpoints"]) == 1
    assert "checkpoint_000000020" in info["skipped_checkpoints"][0]
    assert "model.pt" in info["skipped_checkpoints"][0]


@pytest.mark.parametrize(("temperature", "seed"), [(0.0, 0), (0.9, 7), (1.5, 12345)])
def test_generation_is_deterministic_and_matches_the_model(serve_app, checkpoints, temperature, seed):
    url, _, _ = serve_app
    body = {"prompt": "The quick brown fox", "max_tokens": 12, "temperature": temperature, "seed": seed}
    first = _complete(url, **body)
    second = _complete(url, **body)
    toks = first["choices"][0]["token_ids"]
    assert toks == second["choices"][0]["token_ids"]
    assert toks == _direct(checkpoints, body["prompt"], 12, temperature, seed)
    assert first["usage"] == {"prompt_tokens": 19, "completion_tokens": 12, "total_tokens": 31}
    assert first["model"] == f"{RUN}@step-10"


def test_different_seeds_give_different_text(serve_app):
    url, _, _ = serve_app
    a = _complete(url, prompt="abc", max_tokens=16, temperature=1.0, seed=1)["choices"][0]["token_ids"]
    b = _complete(url, prompt="abc", max_tokens=16, temperature=1.0, seed=2)["choices"][0]["token_ids"]
    assert a != b


def test_streaming_returns_the_same_tokens(serve_app):
    url, _, _ = serve_app
    body = {"prompt": "Streaming: ", "max_tokens": 10, "temperature": 0.8, "seed": 3}
    whole = _complete(url, **body)["choices"][0]
    events = []
    stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{url}/v1/completions", json=stream_body, timeout=30) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    *chunks, usage = [json.loads(e) for e in events[:-1]]
    toks = [t for c in chunks for t in c["choices"][0]["token_ids"]]
    assert toks == whole["token_ids"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 10


def test_concurrent_requests_batch_and_stay_deterministic(serve_app):
    """32 concurrent seeded requests (batched together) give what each gives alone."""
    import asyncio

    url, _, _ = serve_app

    async def go():
        async with httpx.AsyncClient(timeout=60) as client:

            async def one(i):
                r = await client.post(
                    f"{url}/v1/completions",
                    json={"prompt": f"req {i} " * (1 + i % 5), "max_tokens": 8, "temperature": 0, "seed": i},
                )
                assert r.status_code == 200, r.text
                return r.json()["choices"][0]["token_ids"]

            return await asyncio.gather(*(one(i) for i in range(32)))

    together = asyncio.run(go())
    for i in (0, 3, 17, 31):
        alone = _complete(url, prompt=f"req {i} " * (1 + i % 5), max_tokens=8, temperature=0, seed=i)
        assert alone["choices"][0]["token_ids"] == together[i]


BAD = [
    ("malformed JSON", b'{"prompt": "hi", ', 400, None, "request body is not valid JSON"),
    ("not an object", b'["hi"]', 400, None, "request body must be a JSON object; got list"),
    ("missing prompt", {"max_tokens": 4}, 400, "prompt", "prompt: required field is missing"),
    (
        "prompt not a string",
        {"prompt": 5},
        400,
        "prompt",
        "prompt: 5 is not allowed; expected a string, a non-empty array of strings, an array of token ids",
    ),
    ("empty prompt", {"prompt": ""}, 400, "prompt", "prompt: must not be empty"),
    (
        "prompt longer than the context",
        {"prompt": "x" * 65},
        400,
        "prompt",
        "prompt: 65 tokens (UTF-8 bytes) is longer than the model's context of 64 tokens",
    ),
    (
        "max_tokens negative",
        {"prompt": "hi", "max_tokens": -1},
        400,
        "max_tokens",
        "max_tokens: -1 is out of bounds; allowed: an integer from 0 to 256",
    ),
    (
        "max_tokens too large",
        {"prompt": "hi", "max_tokens": 100000},
        400,
        "max_tokens",
        "max_tokens: 100000 is out of bounds; allowed: an integer from 0 to 256",
    ),
    (
        "max_tokens a string",
        {"prompt": "hi", "max_tokens": "8"},
        400,
        "max_tokens",
        "max_tokens: '8' is out of bounds; allowed: an integer from 0 to 256",
    ),
    (
        "temperature negative",
        {"prompt": "hi", "temperature": -1},
        400,
        "temperature",
        "temperature: -1 is out of bounds; allowed: a number from 0 to 2 (0 is greedy)",
    ),
    (
        "seed negative",
        {"prompt": "hi", "seed": -3},
        400,
        "seed",
        "seed: -3 is not allowed; expected an integer from 0 to 2**63-1",
    ),
    ("stream not a bool", {"prompt": "hi", "stream": "yes"}, 400, "stream", "stream: 'yes' is not a boolean"),
    ("unknown field", {"prompt": "hi", "max_token": 3}, 400, "max_token", "unknown field 'max_token'"),
]


@pytest.mark.parametrize(("case", "body", "status", "param", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_a_4xx_naming_the_field(serve_app, case, body, status, param, message):
    url, _, _ = serve_app
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(f"{url}/v1/completions", content=content, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param
    assert err["message"].startswith(message), err["message"]


def test_wrong_method_and_route_are_4xx_and_replicas_survive(serve_app):
    url, _, _ = serve_app
    assert httpx.get(f"{url}/v1/completions", timeout=10).status_code == 405
    assert httpx.get(f"{url}/v2/nothing", timeout=10).status_code == 404
    # After every bad request above, the replicas still answer.
    for _ in range(4):
        _complete(url, prompt="still alive?", max_tokens=2)


# --- The official OpenAI client, unchanged -----------------------------------------------------


def _client(url):
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="not-checked", max_retries=0, timeout=60)


def test_openai_client_lists_and_retrieves_models(serve_app):
    import openai

    url, _, _ = serve_app
    client = _client(url)
    ids = [m.id for m in client.models.list()]
    assert ids == [f"{RUN}@step-10", RUN]
    assert client.models.retrieve(RUN).owned_by == "hyperpod-ray"
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("gpt-nothing")
    assert info.value.code == "model_not_found"


def test_openai_client_every_prompt_form_and_option(serve_app, checkpoints):
    url, _, _ = serve_app
    client = _client(url)
    # A string prompt with the sampling options: the same tokens as the model called directly.
    r = client.completions.create(
        model=RUN, prompt="The quick brown fox", max_tokens=12, temperature=0.9, top_p=1.0, seed=7, user="u-1"
    )
    assert [c.index for c in r.choices] == [0] and r.object == "text_completion"
    direct = _direct(checkpoints, "The quick brown fox", 12, 0.9, 7)
    assert r.choices[0].text == bytes(direct).decode("utf-8", errors="replace")
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (19, 12, 31)
    assert r.model == f"{RUN}@step-10"
    # Token ids are the same prompt as its text; several prompts x n give prompt-major choices.
    as_text = client.completions.create(model=RUN, prompt="Hi", max_tokens=6, temperature=0)
    as_ids = client.completions.create(model=RUN, prompt=[72, 105], max_tokens=6, temperature=0)
    assert as_ids.choices[0].text == as_text.choices[0].text
    several = client.completions.create(model=RUN, prompt=["Hi", "Yo!"], n=2, max_tokens=5, seed=3)
    assert [c.index for c in several.choices] == [0, 1, 2, 3]
    assert several.usage.prompt_tokens == 5 and several.usage.completion_tokens == 20
    assert several.choices[0].text != several.choices[1].text  # n choices are distinct samples
    ids_lists = client.completions.create(model=RUN, prompt=[[72, 105], [89]], max_tokens=3, temperature=0)
    assert ids_lists.choices[0].text == as_text.choices[0].text[:3] and len(ids_lists.choices) == 2
    # stop: the text ends before the first stop sequence, finish_reason "stop".
    greedy = client.completions.create(model=RUN, prompt="Yo!", max_tokens=6, temperature=0).choices[0]
    stop = greedy.text[1:3]
    cut = client.completions.create(model=RUN, prompt="Yo!", max_tokens=6, temperature=0, stop=[stop, "\x00"])
    assert cut.choices[0].text == greedy.text[: greedy.text.index(stop)] and cut.choices[0].finish_reason == "stop"
    assert greedy.finish_reason == "length"
    full = as_text.choices[0].text
    # echo + logprobs: the prompt is repeated, every token has its logprob (the first prompt
    # token none) and up to `logprobs` alternatives; greedy picks the top one.
    lp = client.completions.create(model=RUN, prompt="Hi", max_tokens=4, temperature=0, echo=True, logprobs=2)
    c = lp.choices[0]
    assert c.text == "Hi" + full[:4]
    assert c.logprobs.tokens == list("Hi" + full[:4]) and c.logprobs.token_logprobs[0] is None
    assert all(v < 0 for v in c.logprobs.token_logprobs[1:]) and c.logprobs.text_offset == list(range(6))
    assert all(len(t) == 2 for t in c.logprobs.top_logprobs[1:])
    assert all(
        max(t, key=t.get) == tok for t, tok in zip(c.logprobs.top_logprobs[2:], c.logprobs.tokens[2:], strict=True)
    )
    # Scoring a prompt: max_tokens 0 with echo.
    score = client.completions.create(model=RUN, prompt="Hi", max_tokens=0, echo=True, logprobs=0)
    assert score.choices[0].text == "Hi" and score.usage.completion_tokens == 0
    # best_of: the best of 3 (highest logprob per token) is returned.
    best = client.completions.create(model=RUN, prompt="Hi", max_tokens=4, best_of=3, n=1, seed=5)
    assert len(best.choices) == 1 and best.usage.completion_tokens == 4
    # logit_bias forces a token; the penalties are accepted in their range.
    forced = client.completions.create(model=RUN, prompt="Hi", max_tokens=4, temperature=0, logit_bias={"120": 100})
    assert forced.choices[0].text == "xxxx"
    penalised = client.completions.create(
        model=RUN, prompt="Hi", max_tokens=8, temperature=0, frequency_penalty=2.0, presence_penalty=-2.0
    )
    assert penalised.usage.completion_tokens == 8
    assert not penalised.choices[0].text.startswith(full)  # greedy repeats one byte; the penalty stops it


def test_openai_client_streams_server_sent_events(serve_app):
    url, _, _ = serve_app
    client = _client(url)
    kwargs = {"model": RUN, "prompt": ["Stream", "Two"], "n": 2, "max_tokens": 8, "seed": 11, "logprobs": 1}
    whole = client.completions.create(**kwargs)
    texts: dict[int, str] = {}
    finish: dict[int, str] = {}
    usage = None
    for chunk in client.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason:
                finish[c.index] = c.finish_reason
        usage = chunk.usage or usage
    assert texts == {c.index: c.text for c in whole.choices}
    assert finish == {0: "length", 1: "length", 2: "length", 3: "length"}
    assert usage is not None and usage.completion_tokens == 32 and usage.prompt_tokens == 9
    # stop while streaming: bytes held back as a possible stop sequence never reach the client.
    greedy = client.completions.create(model=RUN, prompt="Yo!", max_tokens=6, temperature=0).choices[0].text
    stop = greedy[1:3]
    streamed = "".join(
        c.text
        for chunk in client.completions.create(
            model=RUN, prompt="Yo!", max_tokens=6, temperature=0, stop=stop, stream=True
        )
        for c in chunk.choices
    )
    assert streamed == greedy[: greedy.index(stop)]


OPENAI_ERRORS = [
    ("unknown model", {"model": "gpt-nothing"}, 404, "model_not_found"),
    ("temperature above 2", {"temperature": 2.5}, 400, None),
    ("top_p above 1", {"top_p": 1.5}, 400, None),
    ("n zero", {"n": 0}, 400, None),
    ("logprobs above 5", {"logprobs": 6}, 400, None),
    ("best_of below n", {"n": 3, "best_of": 2}, 400, None),
    ("more than 4 stop sequences", {"stop": ["a", "b", "c", "d", "e"]}, 400, None),
    ("penalty out of range", {"presence_penalty": 2.5}, 400, None),
    ("logit_bias out of range", {"logit_bias": {"65": 101}}, 400, None),
    ("stream_options without stream", {"stream_options": {"include_usage": True}}, 400, None),
    ("token id outside the vocabulary", {"prompt": [72, 256]}, 400, None),
    ("unrecognized argument", {"extra_body": {"frobnicate": 1}}, 400, None),
]


@pytest.mark.parametrize(("case", "kwargs", "status", "code"), OPENAI_ERRORS, ids=[e[0] for e in OPENAI_ERRORS])
def test_openai_client_gets_openai_errors(serve_app, case, kwargs, status, code):
    import openai

    url, _, _ = serve_app
    args = {"model": RUN, "prompt": "Hi", "max_tokens": 2, **kwargs}
    with pytest.raises(openai.APIStatusError) as info:
        _client(url).completions.create(**args)
    err = info.value
    assert err.status_code == status
    assert isinstance(err, openai.NotFoundError if status == 404 else openai.BadRequestError)
    assert set(err.body) == {"message", "type", "param", "code"} and err.body["type"] == "invalid_request_error"
    assert err.code == code


def _replica_pids(url, want: int, timeout_s: float = 60) -> set[int]:
    pids: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(pids) < want and time.monotonic() < deadline:
        r = httpx.get(f"{url}/healthz", timeout=10)
        if r.status_code == 200:
            pids.add(r.json()["pid"])
    return pids


def test_reload_newer_checkpoint_without_downtime(serve_app, checkpoints, make_checkpoint):
    """A new `reload` token in user_config loads the newest intact checkpoint in place."""
    url, deploy, _ = serve_app
    before = _replica_pids(url, 2)
    make_checkpoint(checkpoints, 30, seed=3)
    failures, done = [], threading.Event()

    def load():
        with httpx.Client(timeout=30) as c:
            while not done.is_set():
                r = c.post(f"{url}/v1/completions", json={"prompt": "during reload", "max_tokens": 4})
                if r.status_code != 200:
                    failures.append((r.status_code, r.text))

    t = threading.Thread(target=load)
    t.start()
    try:
        deploy(reload="step-30")
        deadline = time.monotonic() + 60
        seen = set()
        while time.monotonic() < deadline and seen != {f"{RUN}@step-30"}:
            seen = {httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"] for _ in range(6)}
    finally:
        done.set()
        t.join()
    assert seen == {f"{RUN}@step-30"}
    assert failures == []
    assert _replica_pids(url, 2) == before  # reconfigured in place, not restarted


def test_replica_kill_recovers_and_keeps_answering(serve_app):
    url, _, _ = serve_app
    pids = _replica_pids(url, 2)
    assert len(pids) == 2
    victim = sorted(pids)[0]
    os.kill(victim, signal.SIGKILL)
    ok = failed = 0
    deadline = time.monotonic() + 90
    survivors: set[int] = set()
    with httpx.Client(timeout=30) as c:
        # Keep answering while Serve replaces the replica (a failed in-flight request is retried once).
        while time.monotonic() < deadline:
            for _attempt in range(2):
                try:
                    r = c.post(f"{url}/v1/completions", json={"prompt": "after the kill", "max_tokens": 4})
                    if r.status_code == 200:
                        ok += 1
                        break
                except httpx.TransportError:
                    pass
            else:
                failed += 1
            survivors = _replica_pids(url, 2, timeout_s=2)
            if len(survivors) == 2 and victim not in survivors and ok >= 10:
                break
    assert failed == 0
    assert ok >= 10
    assert len(survivors) == 2 and victim not in survivors, survivors
