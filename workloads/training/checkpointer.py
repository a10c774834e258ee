"""The train loop's checkpoints: load the newest valid one, save asynchronously, verify, and fall
back together across ranks (workloads/common/checkpoint/ holds the format).

Resume: every rank verifies the shard files it will read of the newest checkpoint (rank 0 its
manifest and meta.json), so a restart's verification does not grow with one process; a torn file
anywhere makes every rank fall back to the previous checkpoint together. The checkpoint is loaded
resharded by DCP to the current world size; the per-rank random generators carry over at the
same world size. Saves are asynchronous (``save_sharded``): the previous save has had
``checkpoint_every_steps`` steps to finish in the background before the next one waits for it.

Its settings slice (``Checkpointer.from_settings``): ``storage_path``, ``run_name``, ``steps``,
``checkpoint_every_steps``, ``seed``, ``sharding``.
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import concurrent.futures

    import torch
    from ray.train import Checkpoint
    from torch import nn

    from config.job_settings import JobSettings
    from workloads.common.model import GPT, GPTConfig, Llama, LlamaConfig
    from workloads.training.data import DataPosition

Optimizers = tuple["torch.optim.Optimizer", "torch.optim.lr_scheduler.LRScheduler"]


def rng_state() -> dict[str, Any]:
    """This process's random generators (python, numpy, torch CPU and CUDA)."""
    import numpy as np
    import torch

    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


@dataclass
class Resumed:
    """Where this attempt starts: the optimizer and schedule to train with (new ones when every
    checkpoint was torn), the step, the data position, and the checkpoint it came from."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    step: int
    position: DataPosition
    path: str | None = None  # None: a fresh start
    meta: dict[str, Any] | None = field(default=None)


class Checkpointer:
    """The run's checkpoints as one rank sees them; every method is collective (every rank calls
    it at the same step)."""

    def __init__(
        self,
        *,
        storage_path: str,
        run_name: str,
        steps: int,
        every: int,
        seed: int,
        sharding: str,
        rank: int,
        world: int,
        run_dir: str,
    ):
        import torch.distributed as dist

        self.storage_path, self.run_name, self.steps, self.every = storage_path, run_name, steps, every
        self.seed, self.sharding = seed, sharding
        self.rank, self.world, self.run_dir = rank, world, run_dir
        # Checkpoint collectives run in the background (async save): a group of their own.
        self.group = dist.new_group(backend="gloo")
        # (future, step, directory) of the save in flight
        self.pending: tuple[concurrent.futures.Future[object], int, str] | None = None

    @classmethod
    def from_settings(cls, s: JobSettings, *, rank: int, world: int, run_dir: str) -> Checkpointer:
        return cls(
            storage_path=s.storage_path,
            run_name=s.run_name,
            steps=s.steps,
            every=s.checkpoint_every_steps,
            seed=s.seed,
            sharding=s.sharding,
            rank=rank,
            world=world,
            run_dir=run_dir,
        )

    def any_saved(self) -> bool:
        """Whether the run has checkpoints (rank 0 lists them): with none, a fresh start draws
        the initial weights."""
        import torch.distributed as dist

        from workloads.common import checkpoint as ckpt

        listed = [bool(ckpt.list_checkpoints(self.storage_path, self.run_name)) if self.rank == 0 else None]
        dist.broadcast_object_list(listed, src=0)
        return bool(listed[0])

    def due(self, done: int) -> bool:
        """A checkpoint after ``done`` steps: every ``checkpoint_every_steps`` and the last."""
        return done % self.every == 0 or done == self.steps

    @staticmethod
    def _state(model: nn.Module, optimizer: torch.optim.Optimizer, progress: dict[str, Any] | None) -> dict[str, Any]:
        # Everything but the tensors in one pickled entry: DCP flattens nested containers into
        # keys, and the per-rank RNG list changes length with the world size.
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(model, optimizer)
        return {"model": model_sd, "optim": optim_sd, "progress": pickle.dumps(progress)}

    def restore(
        self,
        model: nn.Module,
        optimizers: Optimizers,
        model_config: GPTConfig | LlamaConfig,
        *,
        saved: bool,
        new: Callable[[], Optimizers],
        marks: list[tuple[str, float]],
    ) -> Resumed:
        """Load the newest checkpoint every rank verified into ``model`` and ``optimizers``
        (``saved``: ``any_saved()``), or start fresh (``new``: new optimizers, when every checkpoint
        was torn); seeds this rank's random generators where
        the checkpoint's do not carry over. Appends its phases to ``marks``."""
        import torch
        from torch.distributed.checkpoint.state_dict import set_state_dict

        from workloads.common import checkpoint as ckpt
        from workloads.common import model as model_lib
        from workloads.training.data import DataPosition

        optimizer, scheduler = optimizers
        found: tuple[str, dict[str, Any], str] | None = None
        state: dict[str, Any] = {}
        if saved:
            state = self._state(model, optimizer, None)
            loaded = ckpt.find_latest_valid_sharded(self.storage_path, self.run_name, state, process_group=self.group)
            found = None if loaded is None else (loaded.path, loaded.meta, loaded.format)
            if loaded is None:
                # Every checkpoint is torn: start fresh, as without any (_state gave the
                # optimizer its state).
                if self.sharding == "fsdp":
                    # build_model's FSDP module is the GPT or Llama it built, sharded in place.
                    model_lib.init_parameters(cast("GPT | Llama", model), self.seed)
                optimizer, scheduler = new()
        marks.append(("checkpoint", time.time()))

        resumed = Resumed(optimizer=optimizer, scheduler=scheduler, step=0, position=DataPosition())
        same_world = False
        if found is not None:
            path, meta, fmt = found
            if fmt != ckpt.SHARDED_FORMAT:
                raise ValueError(old_format_problem(self.run_name, path, fmt))
            if meta.get("model_config") != model_config.to_dict():
                raise ValueError(
                    f"checkpoint {path} holds model {meta.get('model_config')}, the job "
                    f"is configured for {model_config.to_dict()}"
                )
            ckpt.load_sharded(path, state)
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
            progress = pickle.loads(state["progress"])
            scheduler.load_state_dict(progress["scheduler"])
            resumed.step = int(progress["step"])
            resumed.position = DataPosition(**progress["data_position"])
            resumed.path, resumed.meta = path, meta
            same_world = len(progress["rng"]) == self.world
            if same_world:
                set_rng_state(progress["rng"][self.rank])
            marks.append(("restore", time.time()))
        if not same_world:
            # Fresh start or a new world size: per-rank streams derived from the seed.
            random.seed(self.seed + self.rank)
            torch.manual_seed(self.seed + 7919 * (self.rank + 1))
        return resumed

    def _finish(self) -> Checkpoint:
        """Wait for the save in flight (normally long done) and name it to Ray Train."""
        from ray.train import Checkpoint

        assert self.pending is not None, "called with a save in flight"
        future, _, directory = self.pending
        future.result()
        return Checkpoint(path=directory)

    def save(
        self,
        done: int,
        model: nn.Module,
        optimizers: Optimizers,
        position: DataPosition,
        meta: dict[str, Any],
    ) -> list[tuple[Checkpoint, str]]:
        """Start the save of the state after ``done`` steps (``meta``: what meta.json holds
        besides the step, run, world size and data position); returns the saves that are done
        and can be named to Ray Train (the previous one, and this one at the run's last step)."""
        import torch.distributed as dist

        from workloads.common import checkpoint as ckpt

        optimizer, scheduler = optimizers
        finished: list[tuple[Checkpoint, str]] = []
        # The previous save has had checkpoint_every_steps steps to finish in the background.
        if self.pending is not None:
            finished.append((self._finish(), ckpt.dir_name(self.pending[1])))
        rng_states = [None] * self.world
        dist.all_gather_object(rng_states, rng_state())
        directory = os.path.join(self.run_dir, ckpt.dir_name(done))
        if self.rank == 0 and os.path.exists(directory):
            # Left by an earlier attempt that died at this step: never mixed with new shards.
            shutil.rmtree(directory)
        meta = {
            "step": done,
            "run_name": self.run_name,
            "world_size": self.world,
            "data_position": position.to_dict(),
            **meta,
        }
        state = self._state(
            model,
            optimizer,
            {"step": done, "data_position": position.to_dict(), "rng": rng_states, "scheduler": scheduler.state_dict()},
        )
        self.pending = (ckpt.save_sharded(directory, state, meta, process_group=self.group), done, directory)
        if done == self.steps:
            finished.append((self._finish(), ckpt.dir_name(done)))
            self.pending = None
        return finished


def old_format_problem(run_name: str, path: str, fmt: object) -> str:
    """The job resumes only the sharded (DCP) checkpoints it writes."""
    from workloads.common import checkpoint as ckpt

    return (
        f"training.run_name: run {run_name!r} has a checkpoint in format {fmt!r} ({path}), which this "
        f"job cannot resume; allowed: {ckpt.SHARDED_FORMAT!r} checkpoints (sharded, written by this job), "
        "or a new run_name"
    )


def export_final(s: JobSettings, run_dir: str, *, rank: int, group: Any) -> str | None:
    """``training.export_at_end``: once the run's final checkpoint is written on every rank,
    rank 0 exports it as a Hugging Face folder at ``s.export_dir`` (streamed one shard at a
    time, verified, replacing an earlier export: ``workloads.export``'s ``export_checkpoint``)
    while the others wait; every rank learns the outcome. Returns the folder (None: not asked
    for). A failed export fails the attempt: Ray Train restarts it from the final checkpoint,
    which has no step left to run and exports again."""
    import torch.distributed as dist

    from workloads.common import checkpoint as ckpt

    if not s.export_at_end:
        return None
    path = os.path.join(run_dir, ckpt.dir_name(s.steps))
    out = s.export_dir(s.storage_path)
    dist.barrier(group=group)  # every rank's shards of the final checkpoint are written
    error: list[str | None] = [None]
    if rank == 0:
        from workloads.export.__main__ import export_checkpoint

        try:
            export_checkpoint(
                path, out, getattr(s, "tokenizer", None) or "bytes", replace=True, max_shard_bytes=1 << 30
            )
        except (ValueError, OSError, ckpt.CheckpointError) as err:
            error[0] = str(err)
    dist.broadcast_object_list(error, src=0, group=group)
    if error[0] is not None:
        raise RuntimeError(f"training.export_at_end: {error[0]}")
    return out
