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
    from workloads.inference.engine import load_model

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
    from workloads.inference import local

    url, _, cluster = serve_app
    owner = local.listener_pid(int(url.rsplit(":", 1)[1]))
    ours = {pid for node in cluster.nodes for pid in cluster.worker_processes(node)}
    assert owner in ours, (owner, local.cmdline(owner or 0))
    assert local.cmdline(owner).split()[0].endswith("/haproxy")
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
    with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=30) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    toks = [t for c in chunks for t in c["choices"][0]["token_ids"]]
    assert toks == whole["token_ids"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 10


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
    ("prompt not a string", {"prompt": 5}, 400, "prompt", "prompt: must be a string; got int"),
    ("empty prompt", {"prompt": ""}, 400, "prompt", "prompt: must not be empty"),
    (
        "prompt longer than the context",
        {"prompt": "x" * 65},
        400,
        "prompt",
        "prompt: 65 tokens (UTF-8 bytes) is longer than the model's context of 64 tokens",
    ),
    (
        "max_tokens zero",
        {"prompt": "hi", "max_tokens": 0},
        400,
        "max_tokens",
        "max_tokens: 0 is out of bounds; allowed: an integer from 1 to 256",
    ),
    (
        "max_tokens too large",
        {"prompt": "hi", "max_tokens": 100000},
        400,
        "max_tokens",
        "max_tokens: 100000 is out of bounds; allowed: an integer from 1 to 256",
    ),
    (
        "max_tokens a string",
        {"prompt": "hi", "max_tokens": "8"},
        400,
        "max_tokens",
        "max_tokens: '8' is out of bounds; allowed: an integer from 1 to 256",
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
