"""The Ray Serve app: serve the newest valid checkpoint of a training run over /v1/completions.

One deployment does the HTTP handling and the batching (no extra replica hop): requests are
validated (4xx for bad ones), queued into ``@serve.batch`` and generated together; ``stream:
true`` gets server-sent events, one per token. ``user_config`` carries the batch settings and a
``reload`` token: changing it makes every replica load the newest intact checkpoint in place
(no restart, no downtime), e.g. ``serve deploy`` of the same config with a new token, or on
Kubernetes an edit of the RayService's ``serveConfigV2`` (KubeRay applies that to the running
cluster without a new one). The new weights are read and verified on the host while the old model
serves; the swap then holds new work for a moment, frees the old model on the device and moves the
new one there, so the device never holds two models (a GPU that fits one model and its cache
reloads without running out of memory).

Routes: ``POST /v1/completions``, ``GET /v1/models``, ``GET /v1/models/{id}``, ``GET /healthz``;
the request and response follow OpenAI's completions API (the official ``openai`` client works
unchanged: tests/workloads/inference/test_inference_http.py). The deployment class is most of
it and stays one module: its methods share the replica's state (the model, the gate, the batch
queues); the request and response formats live in ``schema``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, cast

from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from workloads.inference import engine, loading, schema

log = logging.getLogger("ray.serve")

# serve.batch batches async generators too (each caller gets its own stream of rows), but its
# overloads only describe functions that return one list: this is what it makes of _stream.
_batch_stream = cast(
    "Callable[[Callable[[Generate, list[list[engine.GenRequest]]], AsyncIterator[list[Any]]]],"
    " Callable[[Generate, list[engine.GenRequest]], AsyncIterator[tuple[str, list[tuple[int, int]]]]]]",
    serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005, max_concurrent_batches=1),
)

# Longest a request waits at the admission gate (below) for the running batch to end; a safety
# bound only (a batch is a 16-256 token generation), past it the request enters the queue anyway.
ADMIT_WAIT_MAX_S = 30.0


class _SwapGate:
    """Every use of the served model (a batch, prompt log-probabilities, a health check) holds the
    gate; a swap closes it to new uses, waits for the ones running to end, and opens it again
    once the new model is in place."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._unused = asyncio.Event()
        self._unused.set()
        self._users = 0

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[None]:
        while not self._open.is_set():  # re-checked: a swap may close it again before we run
            await self._open.wait()
        self._users += 1
        self._unused.clear()
        try:
            yield
        finally:
            self._users -= 1
            if not self._users:
                self._unused.set()

    @contextlib.asynccontextmanager
    async def closed(self) -> AsyncIterator[None]:
        self._open.clear()
        try:
            while self._users:
                await self._unused.wait()
            yield
        finally:
            self._open.set()


class Generate:
    """A replica: the model, the batching, the HTTP surface."""

    def __init__(
        self,
        storage_path: str,
        run_name: str,
        max_tokens_limit: int = 256,
        default_max_tokens: int = 16,
        torch_threads: int = 1,
        gpu_dtype: str = "bfloat16",
        export_path: str | None = None,
    ):
        import torch

        # Tiny matmuls gain nothing from intra-op threads, and threads fight Ray's own processes.
        torch.set_num_threads(max(1, int(torch_threads)))
        self.device = loading.Device()
        self.dtype = self.device.dtype(gpu_dtype)
        self.storage_path = storage_path
        self.run_name = run_name
        self.max_tokens_limit = max_tokens_limit
        self.default_max_tokens = default_max_tokens
        self.reload_token: Any = None
        self.served = 0
        self.batches = 0  # batches generated, and the requests in them (mean batch size on /healthz)
        self.batched = 0
        # A Hugging Face export (hpray export) instead of the run's newest checkpoint: the model
        # the LLM service serves, here on the platform's own engine.
        self.export_path = export_path
        loaded = self._load()
        loaded.model = self.device.place(loaded.model)
        self._set_model(loaded)
        self._gate = _SwapGate()
        self.last_swap_pause_s: float | None = None
        # Set while no batch is generating: the admission gate in front of @serve.batch.
        self._running = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def _load(self) -> loading.LoadedModel:
        """The model to serve: the export (``export_path``), else the run's newest intact checkpoint."""
        if self.export_path:
            return loading.load_export(self.export_path, self.dtype)
        return loading.load_model(self.storage_path, self.run_name, self.dtype)

    def _set_model(self, loaded: loading.LoadedModel) -> None:
        self.loaded = loaded
        self.loaded_at = int(time.time())
        self.limits = schema.Limits(
            block_size=loaded.model.config.block_size,
            max_tokens_limit=self.max_tokens_limit,
            default_max_tokens=self.default_max_tokens,
        )
        for problem in loaded.skipped:
            log.warning("skipped a torn checkpoint, serving %s instead: %s", loaded.model_id, problem)
        log.info("serving %s from %s", loaded.model_id, loaded.path)

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Apply batch settings; a new ``reload`` token loads the newest intact checkpoint."""
        # serve.batch's wrapper has the setters; its annotation gives the method's own type.
        if "max_batch_size" in user_config:
            self._generate.set_max_batch_size(int(user_config["max_batch_size"]))  # type: ignore[attr-defined]
            self._stream.set_max_batch_size(int(user_config["max_batch_size"]))  # type: ignore[attr-defined]
        if "batch_wait_timeout_s" in user_config:
            self._generate.set_batch_wait_timeout_s(float(user_config["batch_wait_timeout_s"]))  # type: ignore[attr-defined]
            self._stream.set_batch_wait_timeout_s(float(user_config["batch_wait_timeout_s"]))  # type: ignore[attr-defined]
        token = user_config.get("reload")
        if token != self.reload_token:
            if self.reload_token is not None or token is not None:
                # Read and verified on the host while the old model keeps serving.
                fresh = await asyncio.to_thread(self._load)
                if fresh.step != self.loaded.step or fresh.path != self.loaded.path:
                    await self._swap(fresh)
                else:
                    log.info("reload %r: %s is already the newest intact checkpoint", token, fresh.model_id)
            self.reload_token = token

    async def _swap(self, fresh: loading.LoadedModel) -> None:
        """Serve ``fresh``: new uses of the model wait while the running ones end, the old model
        is freed on the device and the new one moved there (``loading.swap``). Should placing
        fail, the replica has no model left: its health check fails and Serve replaces it."""
        start = time.perf_counter()
        async with self._gate.closed():
            held = time.perf_counter()
            await asyncio.to_thread(loading.swap, self.device, self.loaded, fresh)
            self._set_model(fresh)
        done = time.perf_counter()
        self.last_swap_pause_s = done - start
        log.info(
            "swapped to %s: new work held %.3f s (%.3f s for running work to end, %.3f s to swap)",
            fresh.model_id,
            done - start,
            held - start,
            done - held,
        )

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
    async def _generate(self, items: list[list[engine.GenRequest]]) -> list[tuple[str, list[list[int]]]]:
        # An item is one HTTP request's sequences (prompts x best_of); the batch generates all.
        gens = [g for item in items for g in item]
        self.batches += 1
        self.batched += len(items)
        async with self._gate.use():
            loaded = self.loaded  # one model for the whole batch
            self._busy(True)
            try:
                out = await asyncio.to_thread(engine.generate_batch, loaded.model, gens)
            finally:
                self._busy(False)
        result, start = [], 0
        for item in items:
            result.append((loaded.model_id, out[start : start + len(item)]))
            start += len(item)
        return result

    @_batch_stream
    async def _stream(self, items: list[list[engine.GenRequest]]) -> AsyncIterator[list[Any]]:
        gens = [g for item in items for g in item]
        owner = [(i, j) for i, item in enumerate(items) for j in range(len(item))]
        async with self._gate.use():
            loaded = self.loaded
            steps = engine.stream_batch(loaded.model, gens)
            self._busy(True)
            try:
                while True:
                    step = await asyncio.to_thread(next, steps, None)
                    if step is None:
                        return
                    # Every sequence of a request has the same max_tokens, so they end together;
                    # StopIteration in a slot ends that caller's stream.
                    row: list[Any] = [StopIteration] * len(items)
                    for k, tok in step:
                        i, j = owner[k]
                        if row[i] is StopIteration:
                            row[i] = (loaded.model_id, [])
                        row[i][1].append((j, tok))
                    yield row
            finally:
                self._busy(False)

    def _sequences(self, req: schema.Completion) -> list[engine.GenRequest]:
        """The sequences to generate: ``best_of`` per prompt. Each gets its own seed derived from
        ``seed`` (the first one ``seed`` itself), so choices differ and repeat across calls."""
        record = req.logprobs if req.logprobs is not None else (0 if req.best_of > req.n else None)
        out = []
        for p, ids in enumerate(req.all_prompts):
            for k in range(req.best_of):
                seed = None if req.seed is None else (req.seed + p * req.best_of + k) % (schema.MAX_SEED + 1)
                out.append(
                    engine.GenRequest(
                        list(ids),
                        req.max_tokens,
                        req.temperature,
                        seed,
                        top_p=req.top_p,
                        frequency_penalty=req.frequency_penalty,
                        presence_penalty=req.presence_penalty,
                        logit_bias=req.logit_bias,
                        logprobs=record,
                    )
                )
        return out

    def _model_ids(self) -> tuple[str, str]:
        """What clients may send as ``model``: the checkpoint's id, or the run name (whatever
        checkpoint is served now)."""
        return (self.loaded.model_id, self.run_name)

    def _models(self) -> list[dict[str, Any]]:
        entry = {"object": "model", "created": self.loaded_at, "owned_by": "hyperpod-ray"}
        details = {"checkpoint": self.loaded.path, "step": self.loaded.step, "skipped_checkpoints": self.loaded.skipped}
        return [
            {"id": self.loaded.model_id, **entry, "root": self.run_name, **details},
            {"id": self.run_name, **entry, "root": self.loaded.model_id, **details},
        ]

    async def _prompt_logprobs(
        self, req: schema.Completion
    ) -> list[tuple[list[float | None], list[dict[int, float] | None]] | None]:
        if not (req.echo and req.logprobs is not None):
            return [None] * len(req.all_prompts)
        async with self._gate.use():
            model, k = self.loaded.model, req.logprobs
            return [await asyncio.to_thread(engine.prompt_logprobs, model, list(p), k) for p in req.all_prompts]

    async def _complete(self, req: schema.Completion) -> dict[str, Any]:
        gens = self._sequences(req)
        echo = await self._prompt_logprobs(req)
        await self._admit()
        model_id, toks = await self._generate(gens)
        outputs = []
        for p, _ in enumerate(req.all_prompts):
            group = []
            for k in range(req.best_of):
                g = gens[p * req.best_of + k]
                e = echo[p]
                group.append(
                    schema.Generated(
                        g.prompt_ids,
                        toks[p * req.best_of + k],
                        g.token_logprobs,
                        g.top_logprobs,
                        e[0] if e else None,
                        e[1] if e else None,
                    )
                )
            outputs.append(group)
        self.served += 1
        return schema.completion_body(model_id, req, outputs)

    # HTTP ----------------------------------------------------------------------------------

    async def __call__(self, request: Request) -> Response:
        # The raw ASGI path: request.url would build (and parse) a whole URL per request.
        path = request.scope["path"].rstrip("/")
        try:
            if path.endswith("/v1/completions"):
                if request.method != "POST":
                    raise schema.RequestError(405, f"{request.method} is not allowed on /v1/completions; use POST")
                req = schema.validate(schema.parse_body(await request.body()), self.limits, self._model_ids())
                if req.stream:
                    return StreamingResponse(self._sse(req), media_type="text/event-stream")
                return JSONResponse(await self._complete(req))
            if path.endswith("/v1/models"):
                return JSONResponse({"object": "list", "data": self._models()})
            if "/v1/models/" in path:
                wanted = path.rsplit("/v1/models/", 1)[1]
                for entry in self._models():
                    if entry["id"] == wanted:
                        return JSONResponse(entry)
                raise schema.RequestError(404, f"The model `{wanted}` does not exist", "model", "model_not_found")
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
                404,
                f"no route {request.url.path}; routes: POST /v1/completions, GET /v1/models, GET /v1/models/ID, "
                "GET /healthz",
            )
        except schema.RequestError as err:
            return JSONResponse(err.body(), status_code=err.status)

    async def _sse(self, req: schema.Completion) -> AsyncIterator[bytes]:
        gens = self._sequences(req)  # best_of == n when streaming: every sequence is a choice
        streams = [schema.ChoiceStream(req, i, g.prompt_ids) for i, g in enumerate(gens)]
        cid, created, model_id = schema.completion_id(), int(time.time()), self.loaded.model_id
        if req.echo:
            echo = await self._prompt_logprobs(req)
            for i, s in enumerate(streams):
                e = echo[i // req.n]
                yield schema.stream_chunk(cid, created, model_id, [s.echo(*(e or (None, None)))])
        await self._admit()
        ended = False
        async for model_id, step in self._stream(gens):
            if ended:
                continue  # every choice stopped: drain the steps the batch still generates for it
            deltas = []
            for j, tok in step:
                g = gens[j]
                lp = (g.token_logprobs[-1], g.top_logprobs[-1]) if g.logprobs is not None else (None, None)
                delta = streams[j].push(tok, *lp)
                if delta is not None:
                    deltas.append(delta)
            if deltas:
                yield schema.stream_chunk(cid, created, model_id, deltas)
            if all(s.done for s in streams):  # every choice hit a stop sequence: the client is done
                ended = True
                for chunk in self._sse_tail(req, streams, cid, created, model_id):
                    yield chunk
        if not ended:
            for chunk in self._sse_tail(req, streams, cid, created, model_id):
                yield chunk

    def _sse_tail(
        self, req: schema.Completion, streams: list[schema.ChoiceStream], cid: str, created: int, model_id: str
    ) -> Iterator[bytes]:
        """The last deltas, the usage chunk (``stream_options.include_usage``) and ``[DONE]``."""
        for s in streams:
            delta = s.finish()
            if delta is not None:
                yield schema.stream_chunk(cid, created, model_id, [delta])
        self.served += 1
        if req.include_usage:
            prompt_tokens = sum(len(p) for p in req.all_prompts)
            completion_tokens = sum(s.completion_tokens for s in streams)
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
            yield schema.stream_chunk(cid, created, model_id, [], usage)
        yield b"data: [DONE]\n\n"

    # Lifecycle -----------------------------------------------------------------------------

    async def check_health(self) -> None:
        """Serve calls this every health_check_period_s: the model must really answer."""
        async with self._gate.use():
            await asyncio.to_thread(engine.health_probe, self.loaded.model)

    def __del__(self) -> None:
        # Serve has drained this replica (graceful_shutdown_wait_loop_s) before it gets here.
        log.info("replica shutting down after %d requests", getattr(self, "served", 0))


def deployment(options: dict[str, Any]) -> serve.Deployment:
    """The ``Generate`` deployment with Serve options (num_replicas/autoscaling_config, ...)."""
    # serve.deployment(cls, name=...) returns a Deployment; its overloads type it as a decorator.
    generate: serve.Deployment = serve.deployment(Generate, name="Generate").options(**options)  # type: ignore[attr-defined]
    return generate


def app_builder(args: dict[str, Any]) -> serve.Application:
    """Serve app builder (``import_path: workloads.inference.app:app_builder``).

    ``args``: storage_path, run_name, max_tokens_limit, default_max_tokens, torch_threads,
    gpu_dtype (the weights' dtype on a GPU; CPU replicas serve float32), export_path (a
    Hugging Face export to serve instead of the run's newest checkpoint), and
    optionally ``deployment`` (Serve options; on Kubernetes they come from serveConfigV2's
    ``deployments`` section instead).
    """
    args = dict(args)
    options = args.pop("deployment", {}) or {}
    return deployment(options).bind(**args)


__all__ = ["Generate", "app_builder", "deployment"]
