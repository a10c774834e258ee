"""Batched text generation with the training job's GPT, and loading it from a checkpoint.

Plain PyTorch, no Ray: the Serve replica, the FastAPI baselines in ``bench/`` and the tests all
call the same code. A batch holds sequences of different lengths, right-padded: with causal
attention a token never sees the padding after it, so each row's logits are those of the row
alone. A batch of one runs exactly the operations of ``GPT.generate`` (same cropping, scaling,
softmax and ``torch.multinomial`` with the request's own seeded generator), so a request's tokens
equal what calling the model directly gives.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Iterator

import torch
from torch.nn import functional as F

from workloads.common import checkpoint as ckpt
from workloads.common.model import GPT, GPTConfig

log = logging.getLogger("workloads.inference")


@dataclass
class GenRequest:
    """One generation: prompt token ids, how many tokens to add, sampling settings."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 1.0
    seed: int | None = None
    _generator: torch.Generator | None = field(default=None, repr=False)

    def generator(self) -> torch.Generator:
        if self._generator is None:
            self._generator = torch.Generator()
            if self.seed is None:
                self._generator.seed()
            else:
                self._generator.manual_seed(self.seed)
        return self._generator


@dataclass
class LoadedModel:
    model: GPT
    run_name: str
    step: int
    path: str
    skipped: list[str]  # newer checkpoints that were torn and skipped

    @property
    def model_id(self) -> str:
        return f"{self.run_name}@step-{self.step}"


def model_config_of(meta: dict) -> GPTConfig:
    """The architecture stored in a checkpoint's meta.json."""
    for key in ("model_config", "model", "gpt_config", "config"):
        if isinstance(meta.get(key), dict):
            return GPTConfig.from_dict(meta[key])
    raise ckpt.CheckpointError(
        f"checkpoint meta.json holds no model config (looked for model_config); keys: {sorted(meta)}"
    )


def default_device() -> str:
    """The replica's GPU when Ray gave it one (CUDA_VISIBLE_DEVICES), else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(storage: str, run_name: str, device: str | None = None) -> LoadedModel:
    """Load the newest intact checkpoint of ``run_name`` (torn newer ones are skipped and named)."""
    found = ckpt.list_checkpoints(storage, run_name)
    if not found:
        raise ckpt.CheckpointError(
            f"run {run_name!r} has no checkpoints under {storage}; run the training job "
            "(make rehearse-train locally) first"
        )
    # The training workload's integrity check (checkpoint.load verifies the manifest), newest
    # first, as checkpoint.load_latest_valid does; here each skipped one is also reported.
    skipped: list[str] = []
    loaded = None
    for _step, path in found:
        try:
            loaded = ckpt.load(path, keys=["model"])
            break
        except ckpt.CheckpointError as err:
            skipped.append(str(err))
    if loaded is None:
        raise ckpt.CheckpointError(
            f"none of the {len(found)} checkpoints of run {run_name!r} under {storage} is intact: "
            + " | ".join(skipped)
        )
    for s in skipped:
        log.warning("newest checkpoint is torn, serving the previous one instead: %s", s)
    model = GPT(model_config_of(loaded.meta))
    state = loaded.state["model"]
    # Checkpoints of a torch.compile'd or DDP-wrapped model carry prefixes; strip them.
    state = {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in state.items()}
    model.load_state_dict(state)
    model.to(device or default_device()).eval()
    log.info("serving %s step %d from %s", run_name, loaded.step, loaded.path)
    return LoadedModel(model=model, run_name=run_name, step=loaded.step, path=loaded.path, skipped=skipped)


@torch.no_grad()
def stream_batch(model: GPT, requests: list[GenRequest]) -> Iterator[list[tuple[int, int]]]:
    """Generate for every request at once; yield, per step, ``[(request index, token id)]``.

    Requests drop out of the batch when they have their ``max_tokens``.
    """
    block = model.config.block_size
    device = next(model.parameters()).device
    seqs = [list(r.prompt_ids) for r in requests]
    left = [r.max_tokens for r in requests]
    while True:
        active = [i for i, n in enumerate(left) if n > 0]
        if not active:
            return
        ctx = [seqs[i][-block:] for i in active]
        lens = [len(c) for c in ctx]
        width = max(lens)
        if len(active) == 1:
            x = torch.tensor(ctx, dtype=torch.long)
        else:
            x = torch.zeros((len(active), width), dtype=torch.long)
            for row, c in enumerate(ctx):
                x[row, : len(c)] = torch.tensor(c, dtype=torch.long)
        logits, _ = model(x.to(device))
        # Sampling on the CPU with each request's own seeded generator (as GPT.generate locally).
        logits = logits.float().cpu() if logits.device.type != "cpu" else logits
        out: list[tuple[int, int]] = []
        for row, i in enumerate(active):
            last = logits[row : row + 1, lens[row] - 1, :]
            req = requests[i]
            if req.temperature == 0:
                nxt = int(last.argmax(dim=-1))
            else:
                probs = F.softmax(last / req.temperature, dim=-1)
                nxt = int(torch.multinomial(probs, num_samples=1, generator=req.generator()))
            seqs[i].append(nxt)
            left[i] -= 1
            out.append((i, nxt))
        yield out


def generate_batch(model: GPT, requests: list[GenRequest]) -> list[list[int]]:
    """The generated token ids of every request (prompt excluded)."""
    result: list[list[int]] = [[] for _ in requests]
    for step in stream_batch(model, requests):
        for i, tok in step:
            result[i].append(tok)
    return result


def health_probe(model: GPT) -> None:
    """Raise unless the model really answers: finite logits and a valid greedy token."""
    with torch.no_grad():
        device = next(model.parameters()).device
        logits, _ = model(torch.tensor([[72, 105]], dtype=torch.long, device=device))
    if not bool(torch.isfinite(logits).all()):
        raise RuntimeError("model produced non-finite logits")
    tok = int(logits[0, -1].argmax())
    if not 0 <= tok < model.config.vocab_size or math.isnan(float(logits[0, -1, tok])):
        raise RuntimeError(f"model produced an invalid token {tok}")
