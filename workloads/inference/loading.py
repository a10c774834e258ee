"""The served model: loading it from the training job's checkpoint, and the device it runs on.

A replica reads only the model's tensors of the newest intact checkpoint, straight into a model
whose parameters are allocated once in the serving dtype (``load_entry_into``), and
checks them (manifest checksums, every weight finite) on the host. ``Device`` is the replica's
only way on and off its GPU: ``swap`` frees the old model there before the new one arrives, so a
reload needs one model's device memory.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow.fs as pafs
import torch
from torch import nn

from workloads.common import checkpoint as ckpt
from workloads.common import storage as storage_mod
from workloads.common.checkpoint import integrity
from workloads.common.model import GPT, GPTConfig, Llama, LlamaConfig, build, config_from_dict

log = logging.getLogger("workloads.inference")
M = TypeVar("M", bound=nn.Module)


@dataclass
class LoadedModel:
    model: GPT | Llama
    run_name: str
    step: int
    path: str
    skipped: list[str]  # newer checkpoints that were torn and skipped

    @property
    def model_id(self) -> str:
        return f"{self.run_name}@step-{self.step}"


def model_config_of(meta: dict[str, Any]) -> GPTConfig | LlamaConfig:
    """The architecture stored in a checkpoint's meta.json."""
    if isinstance(meta.get("model_config"), dict):  # written by workloads.training.job
        return config_from_dict(meta["model_config"])
    raise ckpt.CheckpointError(
        f"checkpoint meta.json holds no model config (looked for model_config); keys: {sorted(meta)}"
    )


def default_device() -> str:
    """The replica's GPU when Ray gave it one (CUDA_VISIBLE_DEVICES), else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


class Device:
    """Where a replica's model runs: its GPU when Ray gave it one, else the CPU.

    A replica moves models on and off the device only through ``place`` and ``free``, so the
    device holds what these two say (an accountant can count it by overriding them)."""

    def __init__(self, name: str | None = None):
        self.name = name or default_device()

    @property
    def is_gpu(self) -> bool:
        return self.name.startswith("cuda")

    def dtype(self, gpu_dtype: str) -> torch.dtype:
        """The weights' dtype here: ``gpu_dtype`` (config: inference.gpu_dtype) on a GPU,
        float32 on the CPU (bf16 matrix products are slow on most CPUs)."""
        return DTYPES[gpu_dtype] if self.is_gpu else torch.float32

    def place(self, model: M) -> M:
        """``model`` on this device (its host copy is released once moved)."""
        return model.to(self.name)

    def free(self, model: nn.Module) -> None:
        """Release ``model``'s memory on this device; it cannot run afterwards."""
        model.to("meta")
        if self.is_gpu:
            torch.cuda.empty_cache()


def _empty_model(config: GPTConfig | LlamaConfig, dtype: torch.dtype) -> GPT | Llama:
    """``config``'s model in eval mode, its parameters allocated on the CPU in ``dtype`` but not
    initialised (a checkpoint fills them), tied parameters kept tied, buffers recomputed."""
    with torch.device("meta"):
        model = build(config)
    made: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, p in module._parameters.items():
            if p is not None:
                if id(p) not in made:
                    made[id(p)] = nn.Parameter(torch.empty(p.shape, dtype=dtype), requires_grad=False)
                module._parameters[name] = made[id(p)]
        for name, b in module._buffers.items():
            if b is not None:
                module._buffers[name] = torch.empty(b.shape, dtype=b.dtype)
    if isinstance(model, Llama):  # the one with buffers
        model.reset_buffers()
    return model.eval()


def _weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict as checkpoints name it (training saves every key, tied ones too)."""
    return dict(model.state_dict())


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the model's parameters (tied ones once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def load_entry_into(
    path: str, entry: str, tensors: dict[str, torch.Tensor], filesystem: pafs.FileSystem | None = None
) -> None:
    """Copy the tensors of one ``state`` entry (``"model"``: a module's state dict) into
    ``tensors`` in place, converted to each target's dtype; nothing else is read into memory.
    ``tensors`` must name every tensor of the entry and nothing more (``CheckpointError``
    otherwise). Verify the checkpoint first (``checkpoint.load(path, keys=[])`` verifies and reads meta.json).

    Sharded: DCP loads only the entry's items, one shard file region at a time, straight into the
    preallocated tensors (the optimizer's items are never read). Single-writer: ``<entry>.pt`` is
    memory-mapped (local) and copied over tensor by tensor."""
    fs, p = integrity.resolve(path, filesystem)
    manifest = json.loads(integrity.read_bytes(fs, storage_mod.join(p, ckpt.MANIFEST)))
    if manifest.get("format") == ckpt.SHARDED_FORMAT:
        import torch.distributed.checkpoint as dcp

        if not isinstance(fs, pafs.LocalFileSystem):
            raise ckpt.CheckpointError(f"{path}: sharded checkpoints are read from a POSIX path")
        reader = dcp.FileSystemReader(p)
        stored = {
            k.removeprefix(f"{entry}.") for k in reader.read_metadata().state_dict_metadata if k.startswith(f"{entry}.")
        }
        _same_keys(path, entry, stored, tensors)
        # One process reads the whole entry (a replica, a tool), even where a process group exists.
        dcp.load({entry: tensors}, storage_reader=reader, no_dist=True)
        return
    name = storage_mod.join(p, f"{entry}.pt")
    if isinstance(fs, pafs.LocalFileSystem):
        source = torch.load(name, map_location="cpu", mmap=True, weights_only=True)
    else:
        source = torch.load(io.BytesIO(integrity.read_bytes(fs, name)), map_location="cpu", weights_only=True)
    # Checkpoints of a torch.compile'd or DDP-wrapped model carry prefixes; strip them.
    source = {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in source.items()}
    _same_keys(path, entry, set(source), tensors)
    with torch.no_grad():
        for key, target in tensors.items():
            if target.shape != source[key].shape:
                raise ckpt.CheckpointError(
                    f"{path}: {entry}.{key} is {tuple(source[key].shape)} in the checkpoint, "
                    f"{tuple(target.shape)} in the model"
                )
            target.copy_(source[key])
    del source


def _same_keys(path: str, entry: str, stored: set[str], tensors: dict[str, torch.Tensor]) -> None:
    missing, extra = sorted(set(tensors) - stored), sorted(stored - set(tensors))
    if missing or extra:
        raise ckpt.CheckpointError(
            f"{path}: entry {entry!r} does not match the model: missing {missing[:5]}, unexpected {extra[:5]}"
        )


def load_model(storage: str, run_name: str, dtype: torch.dtype = torch.float32) -> LoadedModel:
    """The newest intact checkpoint of ``run_name`` as a model on the CPU in ``dtype``, verified:
    the manifest checks out, every weight is read and finite (torn newer ones are skipped and
    named). Only the model's tensors are read, straight into the model (the optimizer state is
    never loaded); ``Device.place`` puts it on the GPU."""
    found = ckpt.list_checkpoints(storage, run_name)
    if not found:
        raise ckpt.CheckpointError(
            f"run {run_name!r} has no checkpoints under {storage}; run the training job "
            "(make rehearse-train locally) first"
        )
    # The training workload's integrity check (checkpoint.load verifies the manifest), newest
    # first, as checkpoint.load_latest_valid does; here each skipped one is also reported.
    skipped: list[str] = []
    for _step, path in found:
        try:
            checked = ckpt.load(path, keys=[])
            model = _empty_model(model_config_of(checked.meta), dtype)
            load_entry_into(path, "model", _weights(model))
            bad = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
            if bad:
                raise ckpt.CheckpointError(f"checkpoint {path} holds non-finite weights in {bad[:5]}")
        except ckpt.CheckpointError as err:
            skipped.append(str(err))
            continue
        for s in skipped:
            log.warning("newest checkpoint is torn, serving the previous one instead: %s", s)
        log.info("loaded %s step %d from %s in %s", run_name, checked.step, checked.path, dtype)
        return LoadedModel(model=model, run_name=run_name, step=checked.step, path=checked.path, skipped=skipped)
    raise ckpt.CheckpointError(
        f"none of the {len(found)} checkpoints of run {run_name!r} under {storage} is intact: " + " | ".join(skipped)
    )


def byte_tokens_problem(folder: str) -> str | None:
    """Why the export at ``folder`` cannot be served here: its ``tokenizer.json`` is not the
    job's byte tokens (``hf_llama.byte_tokenizer_json``: ids 0-255 are the UTF-8 bytes the
    generation service encodes text as; a 128k-token Llama 3 export is the LLM service's, vLLM
    with its own tokenizer); None when it is."""
    import os

    from workloads.common import hf_llama

    path = os.path.join(folder, "tokenizer.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as err:
        return f"export {folder}: its tokenizer.json cannot be read: {err}"
    if hf_llama.is_byte_tokenizer(data):
        return None
    size = len((data.get("model") or {}).get("vocab") or {}) + len(data.get("added_tokens") or [])
    return (
        f"export {folder}: its tokenizer ({size} tokens) is not the byte tokens the generation service "
        "encodes text as; allowed: an export of a byte-token run (python -m workloads.export --tokenizer "
        "bytes), or serve it with the LLM service (inference.llm)"
    )


def load_export(folder: str, dtype: torch.dtype = torch.float32) -> LoadedModel:
    """A Hugging Face export (``python -m workloads.export``, ``hpray export``) as a model on the
    CPU in ``dtype``: every file checked against its manifest (``hf_llama.verify_export``), its
    tokenizer checked to be the byte tokens this service speaks, the weights read into the
    platform's Llama (``hf_llama.load_hf_into``) and checked finite. The model's id is
    ``<run>@step-<step>`` of the checkpoint it was exported from."""
    import os

    from workloads.common import hf_llama

    try:
        hf_llama.verify_export(folder)
        config, _ = hf_llama.read_config(folder)
        with open(os.path.join(folder, hf_llama.MANIFEST)) as f:
            source = json.load(f).get("source") or {}
    except (hf_llama.HFFormatError, OSError, ValueError) as err:
        raise ckpt.CheckpointError(f"export {folder} is not a verified export: {err}") from err
    problem = byte_tokens_problem(folder)
    if problem is not None:
        raise ckpt.CheckpointError(problem)
    model = _empty_model(config, dtype)
    try:
        hf_llama.load_hf_into(model, folder)
    except hf_llama.HFFormatError as err:
        raise ckpt.CheckpointError(f"export {folder}: {err}") from err
    bad = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        raise ckpt.CheckpointError(f"export {folder} holds non-finite weights in {bad[:5]}")
    checkpoint = str(source.get("checkpoint") or folder)
    run_name = os.path.basename(os.path.dirname(checkpoint.rstrip("/"))) or "export"
    step = int(source.get("step") or 0)
    log.info("loaded export %s (%s step %d) in %s", folder, run_name, step, dtype)
    return LoadedModel(model=model, run_name=run_name, step=step, path=folder, skipped=[])


def swap(device: Device, old: LoadedModel, fresh: LoadedModel) -> LoadedModel:
    """Serve ``fresh`` instead of ``old`` within one model's device memory: ``old`` is freed
    before ``fresh`` reaches the device (nothing may be running on ``old``)."""
    device.free(old.model)
    fresh.model = device.place(fresh.model)
    return fresh
