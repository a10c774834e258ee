"""A bounded load-test client for /v1/completions on 127.0.0.1 (fixed count and time limit).

``run(url, requests=N, concurrency=C, time_limit_s=T)`` sends at most N requests with C in
flight and stops at T seconds; each record has its start time, latency, status, tokens and
whether it was retried (a request that failed with a connection error or 5xx is retried as the
official OpenAI client retries: up to ``RETRIES`` times, after ``FIRST_RETRY_DELAY_S`` and then
twice as long each time, and counted separately).
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx

# The official OpenAI client's retry policy (openai/_constants.py DEFAULT_MAX_RETRIES,
# INITIAL_RETRY_DELAY, MAX_RETRY_DELAY; a test compares them): right after a replica dies, routing
# still picks it for a moment, and an immediate retry would meet it again.
RETRIES = 2
FIRST_RETRY_DELAY_S = 0.5
MAX_RETRY_DELAY_S = 8.0


@dataclass
class Record:
    start_s: float  # since the test began
    latency_s: float
    status: int  # 0: transport error
    tokens: int
    retried: bool = False
    error: str = ""


@dataclass
class Result:
    records: list[Record] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> list[Record]:
        return [r for r in self.records if r.status == 200]

    def summary(self) -> dict[str, Any]:
        lat = sorted(r.latency_s for r in self.ok)

        def q(p: float) -> float:
            return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")

        return {
            "sent": len(self.records),
            "succeeded": len(self.ok),
            "failed": len(self.records) - len(self.ok),
            "retried": sum(r.retried for r in self.records),
            "retried_ok": sum(r.retried and r.status == 200 for r in self.records),
            "req_per_s": len(self.ok) / self.wall_s if self.wall_s else 0.0,
            "tokens_per_s": sum(r.tokens for r in self.ok) / self.wall_s if self.wall_s else 0.0,
            "p50_ms": 1000 * q(0.50),
            "p99_ms": 1000 * q(0.99),
            "mean_ms": 1000 * statistics.fmean(lat) if lat else float("nan"),
            "wall_s": self.wall_s,
        }


def bodies(n: int, max_tokens: int = 16) -> list[dict[str, Any]]:
    """The same fixed, seeded request set for every server."""
    words = ["ray", "serve", "hyperpod", "train", "batch", "token", "model", "GPU"]
    return [
        {
            "prompt": " ".join(words[(i + k) % len(words)] for k in range(3 + i % 6)),
            "max_tokens": max_tokens,
            "temperature": 0.8,
            "seed": i,
        }
        for i in range(n)
    ]


async def _run(
    url: str,
    reqs: list[dict[str, Any]],
    concurrency: int,
    time_limit_s: float,
    retry: bool,
    timeout_s: float,
    on_record: Callable[[int], None] | None = None,
) -> Result:
    res = Result()
    t0 = time.perf_counter()
    it = iter(reqs)
    # aiohttp, not httpx: on this 2-core machine the client shares the CPU with the server it
    # measures, and httpx cost 2-6 ms of CPU per request at concurrency 32 (aiohttp ~1 ms).
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:

        async def one(body: dict[str, Any]) -> None:
            start = time.perf_counter()
            status, tokens, err, attempt = 0, 0, "", 0
            for attempt in range(1 + RETRIES if retry else 1):
                if attempt:
                    await asyncio.sleep(min(FIRST_RETRY_DELAY_S * 2 ** (attempt - 1), MAX_RETRY_DELAY_S))
                try:
                    async with client.post(url, json=body) as r:
                        status = r.status
                        if status == 200:
                            tokens = (await r.json())["usage"]["completion_tokens"]
                            break
                        err = (await r.text())[:200]
                    if status < 500:
                        break  # a client error is not retried
                except (TimeoutError, aiohttp.ClientError) as e:
                    status, err = 0, f"{type(e).__name__}: {e}"
            res.records.append(
                Record(start - t0, time.perf_counter() - start, status, tokens, retried=attempt > 0, error=err)
            )
            if on_record is not None:
                on_record(len(res.records))

        async def worker() -> None:
            for body in it:
                if time.perf_counter() - t0 > time_limit_s:
                    return
                await one(body)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    res.wall_s = time.perf_counter() - t0
    return res


def run(
    url: str,
    *,
    requests: int,
    concurrency: int,
    time_limit_s: float,
    max_tokens: int = 16,
    retry: bool = False,
    timeout_s: float = 30.0,
    warmup: int = 0,
    on_record: Callable[[int], None] | None = None,
) -> Result:
    """``on_record(n)``, if given, is called after each finished request with the count so far."""
    if warmup:
        asyncio.run(_run(url, bodies(warmup, max_tokens), min(concurrency, warmup), time_limit_s, False, timeout_s))
    return asyncio.run(_run(url, bodies(requests, max_tokens), concurrency, time_limit_s, retry, timeout_s, on_record))


def wait_ready(url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            r = httpx.post(url, json={"prompt": "ready?", "max_tokens": 1}, timeout=10)
            if r.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} not ready after {timeout_s:.0f} s")


def in_background(
    run_load: Callable[[Callable[[int], None]], Any], *, until: int
) -> tuple[threading.Thread, dict[str, Any]]:
    """Starts ``run_load(on_count)`` in a thread and returns once ``until`` requests have finished, or
    the load ended first (then the thread is no longer alive): the rehearsals' moment to kill
    something under load. The load's result lands in the returned dict under ``"r"``."""
    result: dict[str, Any] = {}
    reached = threading.Event()

    def load() -> None:
        try:
            result["r"] = run_load(lambda n: reached.set() if n >= until else None)
        finally:
            reached.set()

    th = threading.Thread(target=load, daemon=True)
    th.start()
    reached.wait()
    return th, result
