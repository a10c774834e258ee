"""The Ray Serve app: serve the newest valid checkpoint of a training run over /v1/completions.

One deployment does the HTTP handling and the batching (no extra replica hop): requests are
validated (4xx for bad ones), queued into ``@serve.batch`` and generated together; ``stream:
true`` gets server-sent events, one per token. ``user_config`` carries the batch settings and a
``reload`` token: changing it makes every replica load the newest intact checkpoint in place
(no restart, no downtime), e.g. ``serve deploy`` of the same config with a new token, or on
Kubernetes an edit of the RayService's ``serveConfigV2`` (KubeRay applies that to the running
cluster without a new one).

Routes: ``POST /v1/completions``, ``GET /v1/models``, ``GET /healthz``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from workloads.inference import engine, schema

log = logging.getLogger("ray.serve")

# Longest a request waits at the admission gate (below) for the running batch to end; a safety
# bound only (a batch is a 16-256 token generation), past it the request enters the queue anyway.
ADMIT_WAIT_MAX_S = 30.0


class Generate:
    """A replica: the model, the batching, the HTTP surface."""

    def __init__(
        self,
        storage_path: str,
        run_name: str,
        max_tokens_limit: int = 256,
        default_max_tokens: int = 16,
        torch_threads: int = 1,
    ):
        import torch

        # Tiny matmuls gain nothing from intra-op threads, and threads fight Ray's own processes.
        torch.set_num_threads(max(1, int(torch_threads)))
        self.storage_path = storage_path
        self.run_name = run_name
        self.max_tokens_limit = max_tokens_limit
        self.default_max_tokens = default_max_tokens
        self.reload_token: Any = None
        self.served = 0
        self.batches = 0  # batches generated, and the requests in them (mean batch size on /healthz)
        self.batched = 0
        self._set_model(engine.load_model(storage_path, run_name))
        # Set while no batch is generating: the admission gate in front of @serve.batch.
        self._running = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def _set_model(self, loaded: engine.LoadedModel) -> None:
        self.loaded = loaded
        self.limits = schema.Limits(
            block_size=loaded.model.config.block_size,
            max_tokens_limit=self.max_tokens_limit,
            default_max_tokens=self.default_max_tokens,
        )
        for problem in loaded.skipped:
            log.warning("skipped a torn checkpoint, serving %s instead: %s", loaded.model_id, problem)
        log.info("serving %s from %s", loaded.model_id, loaded.path)

    async def reconfigure(self, user_config: dict) -> None:
        """Apply batch settings; a new ``reload`` token loads the newest intact checkpoint."""
        if "max_batch_size" in user_config:
            self._generate.set_max_batch_size(int(user_config["max_batch_size"]))
            self._stream.set_max_batch_size(int(user_config["max_batch_size"]))
        if "batch_wait_timeout_s" in user_config:
            self._generate.set_batch_wait_timeout_s(float(user_config["batch_wait_timeout_s"]))
            self._stream.set_batch_wait_timeout_s(float(user_config["batch_wait_timeout_s"]))
        token = user_config.get("reload")
        if token != self.reload_token:
            if self.reload_token is not None or token is not None:
                # Load beside the running model, then swap: requests keep being served meanwhile.
                fresh = await asyncio.to_thread(engine.load_model, self.storage_path, self.run_name)
                if fresh.step != self.loaded.step or fresh.path != self.loaded.path:
                    self._set_model(fresh)
                else:
                    log.info("reload %r: %s is already the newest intact checkpoint", token, fresh.model_id)
            self.reload_token = token

    # Batched generation --------------------------------------------------------------------
    #
    # Admission gate: a request enters a @serve.batch queue only while no batch is generating.
    # Serve's batch loop (ray 2.60) cuts a batch as soon as its wait (batch_wait_timeout_s)
    # ends and only then queues it for the one running slot (max_concurrent_batches=1), so
    # while a batch generates, every request that arrives is cut into a batch of its own that
    # waits behind the running one: measured here, a mean batch of 1.0-1.3 with 32 requests in
    # the replica. Held at the gate instead, the requests that arrived during a batch enter the
    # queue together when it ends and form the next batch (up to max_batch_size).

    async def _admit(self) -> None:
        # Never stall a request behind a batch that does not end: serve it unbatched.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), ADMIT_WAIT_MAX_S)

    def _busy(self, on: bool) -> None:
        self._running += 1 if on else -1
        if self._running:
            self._idle.clear()
        else:
            self._idle.set()

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005, max_concurrent_batches=1)
    async def _generate(self, reqs: list[schema.Completion]) -> list[tuple[str, list[int]]]:
        loaded = self.loaded  # one model for the whole batch, even if a reload swaps it
        gens = [engine.GenRequest(r.prompt_ids, r.max_tokens, r.temperature, r.seed) for r in reqs]
        self.batches += 1
        self.batched += len(reqs)
        self._busy(True)
        try:
            out = await asyncio.to_thread(engine.generate_batch, loaded.model, gens)
        finally:
            self._busy(False)
        return [(loaded.model_id, toks) for toks in out]

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005, max_concurrent_batches=1)
    async def _stream(self, reqs: list[schema.Completion]):
        loaded = self.loaded
        gens = [engine.GenRequest(r.prompt_ids, r.max_tokens, r.temperature, r.seed) for r in reqs]
        steps = engine.stream_batch(loaded.model, gens)
        self._busy(True)
        try:
            while True:
                step = await asyncio.to_thread(next, steps, None)
                if step is None:
                    return
                # StopIteration in a slot ends that caller's stream (its max_tokens are reached).
                row: list[Any] = [StopIteration] * len(reqs)
                for i, tok in step:
                    row[i] = (loaded.model_id, tok)
                yield row
        finally:
            self._busy(False)

    # HTTP ----------------------------------------------------------------------------------

    async def __call__(self, request: Request) -> Response:
        # The raw ASGI path: request.url would build (and parse) a whole URL per request.
        path = request.scope["path"].rstrip("/")
        try:
            if path.endswith("/v1/completions"):
                if request.method != "POST":
                    raise schema.RequestError(405, f"{request.method} is not allowed on /v1/completions; use POST")
                req = schema.validate(schema.parse_body(await request.body()), self.limits)
                if req.stream:
                    return StreamingResponse(self._sse(req), media_type="text/event-stream")
                await self._admit()
                model_id, toks = await self._generate(req)
                self.served += 1
                return JSONResponse(schema.response(model_id, req, toks))
            if path.endswith("/v1/models"):
                return JSONResponse(
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": self.loaded.model_id,
                                "object": "model",
                                "owned_by": "hyperpod-ray",
                                "checkpoint": self.loaded.path,
                                "step": self.loaded.step,
                                "skipped_checkpoints": self.loaded.skipped,
                            }
                        ],
                    }
                )
            if path.endswith("/healthz"):
                return JSONResponse(
                    {
                        "status": "ok",
                        "model": self.loaded.model_id,
                        "pid": os.getpid(),
                        "batches": self.batches,
                        "batched_requests": self.batched,
                    }
                )
            raise schema.RequestError(
                404, f"no route {request.url.path}; routes: POST /v1/completions, GET /v1/models, GET /healthz"
            )
        except schema.RequestError as err:
            return JSONResponse(err.body(), status_code=err.status)

    async def _sse(self, req: schema.Completion):
        enc = None
        await self._admit()
        async for model_id, tok in self._stream(req):
            if enc is None:
                enc = schema.StreamEncoder(model_id, req)
            yield enc.token(tok)
        if enc is None:
            enc = schema.StreamEncoder(self.loaded.model_id, req)
        self.served += 1
        yield enc.finish()

    # Lifecycle -----------------------------------------------------------------------------

    async def check_health(self) -> None:
        """Serve calls this every health_check_period_s: the model must really answer."""
        await asyncio.to_thread(engine.health_probe, self.loaded.model)

    def __del__(self):
        # Serve has drained this replica (graceful_shutdown_wait_loop_s) before it gets here.
        log.info("replica shutting down after %d requests", getattr(self, "served", 0))


def deployment(options: dict):
    """The ``Generate`` deployment with Serve options (num_replicas/autoscaling_config, ...)."""
    return serve.deployment(Generate, name="Generate").options(**options)


def app_builder(args: dict):
    """Serve app builder (``import_path: workloads.inference.app:app_builder``).

    ``args``: storage_path, run_name, max_tokens_limit, default_max_tokens, torch_threads, and
    optionally ``deployment`` (Serve options; on Kubernetes they come from serveConfigV2's
    ``deployments`` section instead).
    """
    args = dict(args)
    options = args.pop("deployment", {}) or {}
    return deployment(options).bind(**args)


__all__ = ["Generate", "app_builder", "deployment"]
