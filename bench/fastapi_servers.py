"""The two single-process FastAPI + uvicorn baselines, serving the same model and API as the
Ray Serve app (same schema validation, same engine):

- ``plain``: what a user writes first: an async endpoint that runs the model per request.
- ``batched``: the same with a hand-written asyncio micro-batcher (collect up to
  ``--max-batch`` requests or ``--wait-ms``, generate them together in a worker thread).

``python bench/fastapi_servers.py plain|batched --port P --storage DIR --run NAME``
(127.0.0.1 only).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from workloads.inference import engine, loading, schema


def build(kind: str, storage: str, run: str, max_batch: int, wait_ms: float) -> FastAPI:
    loaded = loading.load_model(storage, run)
    limits = schema.Limits(block_size=loaded.model.config.block_size, max_tokens_limit=256, default_max_tokens=16)
    app = FastAPI()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def batcher() -> None:
        while True:
            first = await queue.get()
            batch = [first]
            deadline = asyncio.get_running_loop().time() + wait_ms / 1000
            while len(batch) < max_batch:
                timeout = deadline - asyncio.get_running_loop().time()
                if timeout <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(queue.get(), timeout))
                except TimeoutError:
                    break
            reqs = [engine.GenRequest(r.prompt_ids, r.max_tokens, r.temperature, r.seed) for r, _ in batch]
            try:
                out = await asyncio.to_thread(engine.generate_batch, loaded.model, reqs)
            except Exception as err:
                for _, fut in batch:
                    fut.set_exception(err)
                continue
            for (_, fut), toks in zip(batch, out, strict=True):
                fut.set_result(toks)

    @app.on_event("startup")
    async def _start() -> None:
        if kind == "batched":
            app.state.batcher = asyncio.create_task(batcher())

    @app.post("/v1/completions")
    async def completions(request: Request) -> JSONResponse:
        try:
            req = schema.validate(schema.parse_body(await request.body()), limits)
        except schema.RequestError as err:
            return JSONResponse(err.body(), status_code=err.status)
        if kind == "plain":
            toks = engine.generate_batch(
                loaded.model, [engine.GenRequest(req.prompt_ids, req.max_tokens, req.temperature, req.seed)]
            )[0]
        else:
            fut = asyncio.get_running_loop().create_future()
            await queue.put((req, fut))
            toks = await fut
        return JSONResponse(schema.response(loaded.model_id, req, toks))

    return app


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["plain", "batched"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--storage", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--wait-ms", type=float, default=5.0)
    a = p.parse_args()
    torch.set_num_threads(1)
    app = build(a.kind, a.storage, a.run, a.max_batch, a.wait_ms)
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
