"""Hugging Face Llama folders in and out of the platform's ``Llama`` (issue 39).

- ``to_hf_name(key)`` / ``from_hf_name(name)``: the platform's state-dict keys (``tok_emb``,
  ``layers.N.attn.wq`` ...) and ``LlamaForCausalLM``'s (``model.embed_tokens``,
  ``model.layers.N.self_attn.q_proj`` ...).
- ``permute_to_hf(w, heads)`` / ``permute_from_hf(w, heads)``: the platform rotates adjacent
  pairs (even, odd) of each head, Hugging Face the two halves; reordering each head's query/key
  rows (torchtitan's ``_permute``/``_reverse_permute``, transformers' convert script's
  ``permute``) makes the two compute the same attention.
- ``to_hf_state_dict`` / ``from_hf_state_dict``: whole state dicts, names and permutation.
- ``hf_config(config, ...)`` / ``config_from_hf(d)``: ``LlamaConfig`` and ``config.json``;
  ``generation_config(...)``: ``generation_config.json``. ``HF_PRESETS``: the shapes of Llama
  3.2 1B/3B and Llama 3.1 8B/70B (128256 tokens, llama3 rope scaling, GQA) as ``LlamaConfig``
  fields.
- ``load_hf_into(model_or_state, folder, *, process_group=None) -> digest``: a Hugging Face
  folder (safetensors shards, ``model.safetensors.index.json``) read into a model or state dict
  in place; a DTensor (FSDP2, dim-0 shards) gets only its own rows, read straight from the file.
- ``export_hf(source, out_dir, *, config, tokenizer_files, max_shard_bytes) -> manifest``: a
  platform state dict or checkpoint directory written as a Hugging Face folder, one tensor at a
  time; ``verify_export(out_dir)``: every file against the export's ``manifest.json``.

Runtime code: imports only ``workloads``, ``config.training`` (the presets' table), torch and the standard library (the safetensors
format is read and written here directly: an 8-byte header length, a JSON header, raw bytes;
so the workloads image needs no new package).

One module because the import, the export and their tests share one table of names, the
permutation, the config mapping and the safetensors layout; split, each half would re-derive
the other's conventions.
"""

from __future__ import annotations

import abc
import hashlib
import json
import math
import os
import re
import struct
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from config.training import HF_PRESETS as _HF_PRESETS
from workloads.common.model import Llama, LlamaConfig, config_from_dict

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
MANIFEST = "manifest.json"
EXPORT_FORMAT = "hpray-hf-export/1"
_CHUNK = 8 << 20

# Llama 3.2 1B/3B and Llama 3.1 8B/70B as LlamaConfig fields (their config.json files), with
# ``tie_word_embeddings``, the base models' special tokens and the published parameter count:
# config.training's table, which also makes them presets of the job's model.
HF_PRESETS: dict[str, dict[str, Any]] = _HF_PRESETS


class HFFormatError(ValueError):
    """A Hugging Face folder, config or export that does not fit (names the file and field)."""


def preset_config(name: str) -> LlamaConfig:
    """``HF_PRESETS[name]`` as a ``LlamaConfig``."""
    if name not in HF_PRESETS:
        raise HFFormatError(f"preset {name!r} is not known; allowed: {', '.join(HF_PRESETS)}")
    return LlamaConfig.from_dict({"arch": "llama", **HF_PRESETS[name]})


# ---------------------------------------------------------------------------------------------
# Names and the rotary permutation

_LAYER = re.compile(r"^layers\.(\d+)\.(.+)$")
_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_TOP = {
    "tok_emb.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "head.weight": "lm_head.weight",
}
_IN_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn.wq.weight": "self_attn.q_proj.weight",
    "attn.wk.weight": "self_attn.k_proj.weight",
    "attn.wv.weight": "self_attn.v_proj.weight",
    "attn.wo.weight": "self_attn.o_proj.weight",
    "mlp_norm.weight": "post_attention_layernorm.weight",
    "mlp.w_gate.weight": "mlp.gate_proj.weight",
    "mlp.w_up.weight": "mlp.up_proj.weight",
    "mlp.w_down.weight": "mlp.down_proj.weight",
}
_TOP_BACK = {v: k for k, v in _TOP.items()}
_IN_LAYER_BACK = {v: k for k, v in _IN_LAYER.items()}


def _strip(key: str) -> str:
    return key.removeprefix("_orig_mod.").removeprefix("module.")


def to_hf_name(key: str) -> str:
    """The Hugging Face name of the platform's state-dict ``key``."""
    key = _strip(key)
    if key in _TOP:
        return _TOP[key]
    m = _LAYER.match(key)
    if m and m.group(2) in _IN_LAYER:
        return f"model.layers.{m.group(1)}.{_IN_LAYER[m.group(2)]}"
    raise HFFormatError(f"state-dict key {key!r} has no Hugging Face name; allowed: {', '.join(_TOP)}, layers.N.*")


def from_hf_name(name: str) -> str:
    """The platform's state-dict key of the Hugging Face tensor ``name``."""
    if name in _TOP_BACK:
        return _TOP_BACK[name]
    m = _HF_LAYER.match(name)
    if m and m.group(2) in _IN_LAYER_BACK:
        return f"layers.{m.group(1)}.{_IN_LAYER_BACK[m.group(2)]}"
    raise HFFormatError(f"tensor {name!r} is not a LlamaForCausalLM weight the platform's Llama holds")


def permute_to_hf(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Query/key rows from adjacent-pair rotary (the platform's) to half rotary (Hugging Face's):
    a head's row ``2i + j`` becomes row ``j * head_dim / 2 + i``."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def permute_from_hf(w: torch.Tensor, heads: int) -> torch.Tensor:
    """The inverse of ``permute_to_hf``."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _heads(key: str, config: LlamaConfig) -> int | None:
    """Heads whose rows ``key`` holds when it is a query or key projection, else None."""
    key = _strip(key)
    if key.endswith("attn.wq.weight"):
        return config.n_head
    if key.endswith("attn.wk.weight"):
        return config.n_kv_head
    return None


def to_hf_tensor(key: str, t: torch.Tensor, config: LlamaConfig) -> torch.Tensor:
    heads = _heads(key, config)
    return t if heads is None else permute_to_hf(t, heads)


def from_hf_tensor(key: str, t: torch.Tensor, config: LlamaConfig) -> torch.Tensor:
    heads = _heads(key, config)
    return t if heads is None else permute_from_hf(t, heads)


def to_hf_state_dict(state: Mapping[str, torch.Tensor], config: LlamaConfig) -> dict[str, torch.Tensor]:
    """The platform's state dict as ``LlamaForCausalLM``'s (untied: ``lm_head`` is the head)."""
    return {to_hf_name(k): to_hf_tensor(k, v, config) for k, v in state.items()}


def from_hf_state_dict(state: Mapping[str, torch.Tensor], config: LlamaConfig) -> dict[str, torch.Tensor]:
    """``LlamaForCausalLM``'s state dict as the platform's; a tied one's embedding is the head."""
    out = {}
    for name, v in state.items():
        if name.endswith("rotary_emb.inv_freq"):
            continue
        key = from_hf_name(name)
        out[key] = from_hf_tensor(key, v, config)
    if "head.weight" not in out and "tok_emb.weight" in out:
        out["head.weight"] = out["tok_emb.weight"]
    return out


# ---------------------------------------------------------------------------------------------
# config.json and generation_config.json

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def hf_config(
    config: LlamaConfig,
    *,
    bos_token_id: int | None = None,
    eos_token_id: int | list[int] | None = None,
    dtype: torch.dtype = torch.float32,
) -> dict[str, Any]:
    """``config.json`` of ``LlamaForCausalLM`` for ``config`` (untied embeddings, as the
    platform's Llama; ``max_position_embeddings`` is ``block_size``)."""
    name = DTYPE_NAMES[dtype]
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": config.n_embd,
        "intermediate_size": config.ffn_hidden,
        "num_attention_heads": config.n_head,
        "num_key_value_heads": config.n_kv_head,
        "num_hidden_layers": config.n_layer,
        "head_dim": config.head_dim,
        "vocab_size": config.vocab_size,
        "max_position_embeddings": config.block_size,
        "rope_theta": config.rope_theta,
        "rope_scaling": dict(config.rope_scaling) if config.rope_scaling is not None else None,
        "rms_norm_eps": config.norm_eps,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": True,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "torch_dtype": name,
        "dtype": name,
    }


def _field(data: Mapping[str, Any], key: str, source: str) -> Any:
    if key not in data:
        raise HFFormatError(f"{source}: {key} is missing; a LlamaForCausalLM config.json holds it")
    return data[key]


def config_from_hf(data: Mapping[str, Any], source: str = CONFIG) -> LlamaConfig:
    """The platform's ``LlamaConfig`` of a Llama ``config.json`` (``source`` names it in errors).
    Reads ``rope_scaling``/``rope_theta`` and transformers 5's ``rope_parameters``."""
    arch = data.get("model_type")
    if arch != "llama":
        raise HFFormatError(f"{source}: model_type is {arch!r}; allowed: 'llama'")
    act = data.get("hidden_act", "silu")
    if act != "silu":
        raise HFFormatError(f"{source}: hidden_act is {act!r}; allowed: 'silu'")
    for key in ("attention_bias", "mlp_bias"):
        if data.get(key):
            raise HFFormatError(
                f"{source}: {key} is {data[key]!r}; allowed: false (the platform's Llama has no biases)"
            )
    hidden, heads = _field(data, "hidden_size", source), _field(data, "num_attention_heads", source)
    head_dim = data.get("head_dim") or hidden // heads
    if head_dim * heads != hidden:
        raise HFFormatError(
            f"{source}: head_dim is {head_dim} with hidden_size {hidden} and {heads} heads; "
            f"allowed: hidden_size / num_attention_heads ({hidden // heads})"
        )
    params = data.get("rope_parameters") or {}
    scaling = data.get("rope_scaling") or None
    if scaling is None and params.get("rope_type", "default") != "default":
        scaling = params
    theta = data.get("rope_theta", params.get("rope_theta", 10000.0))
    rope: dict[str, Any] | None = None
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind != "llama3":
            raise HFFormatError(f"{source}: rope_scaling.rope_type is {kind!r}; allowed: 'llama3' or no scaling")
        rope = {"rope_type": "llama3"}
        for key in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            rope[key] = _field(scaling, key, f"{source}: rope_scaling")
    try:
        return LlamaConfig(
            block_size=int(_field(data, "max_position_embeddings", source)),
            vocab_size=int(_field(data, "vocab_size", source)),
            n_layer=int(_field(data, "num_hidden_layers", source)),
            n_head=int(heads),
            n_kv_head=int(data.get("num_key_value_heads") or heads),
            n_embd=int(hidden),
            ffn_hidden=int(_field(data, "intermediate_size", source)),
            rope_theta=float(theta),
            norm_eps=float(data.get("rms_norm_eps", 1e-6)),
            rope_scaling=rope,
        )
    except ValueError as err:
        raise HFFormatError(f"{source}: {err}") from err


def generation_config(bos_token_id: int | None, eos_token_id: int | list[int] | None) -> dict[str, Any]:
    """``generation_config.json``: the special tokens; sampling left to the caller."""
    return {"_from_model_config": True, "bos_token_id": bos_token_id, "eos_token_id": eos_token_id}


def read_config(folder: str) -> tuple[LlamaConfig, dict[str, Any]]:
    """``folder``'s ``config.json`` as a ``LlamaConfig`` and as read."""
    path = os.path.join(folder, CONFIG)
    if not os.path.isfile(path):
        raise HFFormatError(f"{path}: no config.json; a Hugging Face model folder holds one")
    with open(path) as f:
        data = json.load(f)
    return config_from_hf(data, path), data


# ---------------------------------------------------------------------------------------------
# safetensors files, read and written directly

_ST_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}


@dataclass
class _Entry:
    file: str  # path
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int  # absolute byte offset of the tensor in the file
    end: int


def _header(path: str) -> tuple[bytes, dict[str, Any]]:
    """The raw header (length prefix included) and its JSON of a safetensors file."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise HFFormatError(f"{path}: {len(head)} bytes, shorter than a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > 100 << 20:
            raise HFFormatError(f"{path}: header length {n} bytes; allowed: up to 100 MiB (not a safetensors file?)")
        raw = f.read(n)
    try:
        return head + raw, json.loads(raw)
    except ValueError as err:
        raise HFFormatError(f"{path}: the safetensors header is not JSON ({err})") from err


def _entries(path: str, raw: bytes, header: dict[str, Any]) -> dict[str, _Entry]:
    base = len(raw)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _ST_DTYPES:
            raise HFFormatError(f"{path}: {name} has dtype {info['dtype']}; allowed: {', '.join(_ST_DTYPES)}")
        s, e = info["data_offsets"]
        out[name] = _Entry(path, _ST_DTYPES[info["dtype"]], tuple(info["shape"]), base + s, base + e)
    return out


def _read_into(fd: int, offset: int, out: torch.Tensor) -> None:
    """Fill the contiguous CPU tensor ``out`` with the bytes at ``offset`` of ``fd``."""
    view = memoryview(out.reshape(-1).view(torch.uint8).numpy().data).cast("B")
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            raise HFFormatError(f"file descriptor {fd}: ended {len(view) - done} bytes early at offset {offset + done}")
        done += n


def _read_rows(entry: _Entry, r0: int, r1: int, fds: dict[str, int], into: torch.Tensor | None = None) -> torch.Tensor:
    """Rows ``[r0, r1)`` (dim 0) of ``entry``, read straight from its file (into ``into`` when
    it is contiguous in the entry's dtype, else into a new tensor)."""
    row = math.prod(entry.shape[1:]) * entry.dtype.itemsize
    shape = (r1 - r0, *entry.shape[1:])
    if into is None or into.dtype != entry.dtype or not into.is_contiguous() or tuple(into.shape) != shape:
        into = torch.empty(shape, dtype=entry.dtype)
    if entry.file not in fds:
        fds[entry.file] = os.open(entry.file, os.O_RDONLY)
    if into.numel():
        _read_into(fds[entry.file], entry.start + r0 * row, into)
    return into


class _Writer:
    """One safetensors file written tensor by tensor (the header first, from shapes alone),
    hashed as it is written."""

    def __init__(self, path: str, specs: list[tuple[str, torch.dtype, tuple[int, ...]]]):
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for name, dtype, shape in specs:
            size = math.prod(shape) * dtype.itemsize
            header[name] = {"dtype": _ST_NAMES[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
            offset += size
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # tensors 8-byte aligned, as safetensors writes them
        self.path, self.specs, self.next = path, specs, 0
        self.sha, self.size = hashlib.sha256(), 0
        self.f = open(path, "wb")  # noqa: SIM115 - closed by close(), across add() calls
        self._write(struct.pack("<Q", len(raw)) + raw)

    def _write(self, data: bytes | memoryview) -> None:
        self.f.write(data)
        self.sha.update(data)
        self.size += len(data)

    def add(self, name: str, t: torch.Tensor) -> None:
        want, dtype, shape = self.specs[self.next]
        if (name, t.dtype, tuple(t.shape)) != (want, dtype, shape):
            raise HFFormatError(
                f"{self.path}: writing {name} {t.dtype} {tuple(t.shape)}, expected {want} {dtype} {shape}"
            )
        self.next += 1
        data = memoryview(t.contiguous().reshape(-1).view(torch.uint8).numpy().data).cast("B")
        for i in range(0, len(data), _CHUNK):
            self._write(data[i : i + _CHUNK])

    def close(self) -> dict[str, Any]:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        return {"size": self.size, "sha256": self.sha.hexdigest()}


# ---------------------------------------------------------------------------------------------
# Import


@dataclass
class Folder:
    """A checked Hugging Face folder: its config, where each tensor lies, and its digest."""

    path: str
    config: LlamaConfig
    raw_config: dict[str, Any]
    entries: dict[str, _Entry]  # Hugging Face name -> where it lies
    files: list[str]  # the safetensors files, by name
    layout: str  # sha256 of the index, the headers and manifest.json


def check_folder(folder: str) -> Folder:
    """Read ``folder``'s config.json, index and safetensors headers (no weights) and check them:
    the index (or one ``model.safetensors``) is there, every file it lists exists and holds the
    tensors it says, and every tensor of the config's model is there with its shape.

    ``layout`` (``sha256:``) covers the index, every file's name and header (names, dtypes,
    shapes, offsets) and the export's ``manifest.json`` when there is one: what a rank can hash
    without reading the weights (``load_hf_into`` also hashes the weights' bytes)."""
    config, raw_config = read_config(folder)
    index_path = os.path.join(folder, INDEX)
    digest = hashlib.sha256()
    if os.path.isfile(index_path):
        with open(index_path, "rb") as f:
            index_bytes = f.read()
        digest.update(index_bytes)
        try:
            weight_map: dict[str, str] = json.loads(index_bytes)["weight_map"]
        except (ValueError, KeyError) as err:
            raise HFFormatError(
                f"{index_path}: no weight_map ({err!r}); an index maps each tensor to its file"
            ) from err
    elif os.path.isfile(os.path.join(folder, SINGLE)):
        _, header = _header(os.path.join(folder, SINGLE))
        weight_map = {name: SINGLE for name in header if name != "__metadata__"}
    else:
        raise HFFormatError(f"{folder}: neither {INDEX} nor {SINGLE}; a Hugging Face folder holds its weights in them")
    files = sorted(set(weight_map.values()))
    missing = [name for name in files if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        raise HFFormatError(f"{index_path}: lists {missing} which {folder} does not hold")
    entries: dict[str, _Entry] = {}
    for name in files:
        path = os.path.join(folder, name)
        raw, header = _header(path)
        digest.update(name.encode() + b"\0" + raw)
        here = _entries(path, raw, header)
        for tensor, file in weight_map.items():
            if file == name:
                if tensor not in here:
                    raise HFFormatError(f"{index_path}: maps {tensor} to {name}, whose header does not hold it")
                entries[tensor] = here[tensor]
    manifest = os.path.join(folder, MANIFEST)
    if os.path.isfile(manifest):
        with open(manifest, "rb") as f:
            digest.update(f.read())
    tied = bool(raw_config.get("tie_word_embeddings", False))
    expected = _expected_shapes(config)
    for key, shape in expected.items():
        name = to_hf_name(key)
        if name not in entries:
            if name == "lm_head.weight" and tied:
                continue
            raise HFFormatError(f"{folder}: tensor {name} is missing (the config's model needs {key} {shape})")
        if entries[name].shape != shape:
            raise HFFormatError(
                f"{entries[name].file}: {name} is {entries[name].shape}, the config's model needs {shape} ({CONFIG})"
            )
    names = {to_hf_name(k) for k in expected}
    extra = sorted(n for n in entries if n not in names and not n.endswith("rotary_emb.inv_freq"))
    if extra:
        raise HFFormatError(f"{folder}: holds tensors the platform's Llama has no place for: {extra[:5]}")
    return Folder(folder, config, raw_config, entries, files, "sha256:" + digest.hexdigest())


def _expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        model = Llama(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


_COMPARED = (
    "vocab_size",
    "n_layer",
    "n_head",
    "n_kv_head",
    "n_embd",
    "ffn_hidden",
    "rope_theta",
    "norm_eps",
    "rope_scaling",
)


def _same_architecture(folder: Folder, config: LlamaConfig) -> None:
    for name in _COMPARED:
        mine, theirs = getattr(config, name), getattr(folder.config, name)
        if mine != theirs:
            raise HFFormatError(
                f"{os.path.join(folder.path, CONFIG)}: {name} is {theirs!r}, the model's is {mine!r}; they must match"
            )


def _rows_of(target: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """The local tensor this rank fills and its rows ``[r0, r1)`` of the whole (dim-0 shards)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    if not isinstance(target, DTensor):
        return target, 0, target.shape[0] if target.dim() else 0
    for p in target.placements:
        if not (isinstance(p, Replicate) or (isinstance(p, Shard) and p.dim == 0)):
            raise HFFormatError(f"a DTensor placed {target.placements}; allowed: Shard(0) or Replicate")
    shape, offset = compute_local_shape_and_global_offset(target.shape, target.device_mesh, target.placements)
    local = target.to_local()
    r0 = offset[0] if offset else 0
    return local, r0, r0 + (shape[0] if shape else 0)


@torch.no_grad()
def load_hf_into(
    model_or_state: nn.Module | Mapping[str, torch.Tensor], folder: str, *, process_group: Any = None
) -> str:
    """Fill ``model_or_state`` (a platform ``Llama``, possibly FSDP2-sharded, or its state dict:
    tensors or DTensors sharded on dim 0) in place from the Hugging Face ``folder``; return the
    folder's digest (``check_folder``). Each tensor reads only its own rows from its file
    (``os.preadv`` straight into the destination when no conversion is needed); query/key
    shards read the whole heads they overlap, to undo the permutation, and keep their rows.

    The digest (``sha256:``) is of the folder's content: the index and every safetensors
    file's sha256, each file hashed whole by one rank (files divided among the ranks of
    ``process_group``, chunk by chunk: the page cache, not the rank's memory, holds them) and
    the hashes shared, before any weight is read. An export's files must match its
    ``manifest.json`` (one changed byte fails the import, naming the file); every rank's
    ``layout`` must be the same (one folder, not copies that differ)."""
    checked = check_folder(folder)
    if process_group is not None:
        import torch.distributed as dist

        layouts: list[Any] = [None] * dist.get_world_size(process_group)
        dist.all_gather_object(layouts, checked.layout, group=process_group)
        if len(set(layouts)) != 1:
            raise HFFormatError(f"{folder}: the ranks read folders that differ: layouts {sorted(set(layouts))}")
    digest = _content_digest(checked, process_group)
    if isinstance(model_or_state, nn.Module):
        config = getattr(model_or_state, "config", None)
        if isinstance(config, LlamaConfig):
            _same_architecture(checked, config)
        state: Mapping[str, torch.Tensor] = model_or_state.state_dict()
    else:
        state = model_or_state
    config = checked.config
    expected = _expected_shapes(config)
    keys = {_strip(k): k for k in state}
    if set(keys) != set(expected):
        missing, extra = sorted(set(expected) - set(keys)), sorted(set(keys) - set(expected))
        raise HFFormatError(
            f"{folder}: the state to fill does not match config.json's model: missing {missing[:5]}, unexpected {extra[:5]}"
        )
    tied = "lm_head.weight" not in checked.entries
    fds: dict[str, int] = {}
    try:
        for key, given in keys.items():
            target = state[given]
            if tuple(target.shape) != expected[key]:
                raise HFFormatError(
                    f"{folder}: {key} is {tuple(target.shape)} in the model, {expected[key]} in {CONFIG}"
                )
            name = "model.embed_tokens.weight" if key == "head.weight" and tied else to_hf_name(key)
            entry = checked.entries[name]
            local, r0, r1 = _rows_of(target)
            heads = _heads(key, config)
            if heads is None:
                got = _read_rows(entry, r0, r1, fds, into=local)
                if got is not local:
                    local.copy_(got)
                continue
            hd = config.head_dim
            h0, h1 = r0 // hd, -(-r1 // hd)
            whole = permute_from_hf(_read_rows(entry, h0 * hd, h1 * hd, fds), h1 - h0)
            local.copy_(whole[r0 - h0 * hd : r1 - h0 * hd])
            del whole
    finally:
        for fd in fds.values():
            os.close(fd)
    return digest


def _content_digest(checked: Folder, process_group: Any) -> str:
    """sha256 of the index and of every file's sha256; this rank hashes its share of the files
    (all of them without a process group) and checks them against the export's manifest."""
    rank, world = 0, 1
    if process_group is not None:
        import torch.distributed as dist

        rank, world = dist.get_rank(process_group), dist.get_world_size(process_group)
    mine = {name: _file_digest(os.path.join(checked.path, name))["sha256"] for name in checked.files[rank::world]}
    sums: dict[str, str] = {}
    if process_group is not None:
        shares: list[Any] = [None] * world
        dist.all_gather_object(shares, mine, group=process_group)
        for share in shares:
            sums.update(share)
    else:
        sums = mine
    manifest_path = os.path.join(checked.path, MANIFEST)
    if os.path.isfile(manifest_path):
        with open(manifest_path) as f:
            listed = json.load(f).get("files", {})
        for name in checked.files:
            want = listed.get(name, {}).get("sha256")
            if want != sums[name]:
                raise HFFormatError(
                    f"{os.path.join(checked.path, name)}: sha256 {sums[name]}, manifest.json says {want}"
                )
    index = os.path.join(checked.path, INDEX)
    index_sha = _file_digest(index)["sha256"] if os.path.isfile(index) else None
    body = json.dumps({"index": index_sha, "files": dict(sorted(sums.items()))}, sort_keys=True)
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# The job's byte tokens as a tokenizer.json


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-ins for the 256 bytes (Hugging Face's ByteLevel pre-tokenizer)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1)]
    printable += list(range(ord("\u00ae"), ord("\u00ff") + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def byte_tokenizer_json() -> dict[str, Any]:
    """The job's byte tokens (workloads.common.tokenizer.ByteTokenizer: id = UTF-8 byte, EOS 0)
    as a Hugging Face ``tokenizer.json`` (``python -m workloads.export --tokenizer bytes``): a byte-level BPE without merges, so transformers, vLLM
    and the generation service encode and decode text to the ids the model was trained on."""
    table = _byte_to_unicode()
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {table[b]: b for b in range(256)},
            "merges": [],
        },
    }


def is_byte_tokenizer(data: Any) -> bool:
    """Whether a parsed ``tokenizer.json`` is ``byte_tokenizer_json``'s tokens: the 256 bytes as
    ids 0-255, no merges, no added tokens (what the generation service's byte encoding needs)."""
    if not isinstance(data, dict):
        return False
    want = byte_tokenizer_json()
    model = data.get("model") or {}
    return (
        model.get("type") == "BPE"
        and model.get("vocab") == want["model"]["vocab"]
        and not model.get("merges")
        and not data.get("added_tokens")
        and (data.get("pre_tokenizer") or {}).get("type") == "ByteLevel"
        and (data.get("decoder") or {}).get("type") == "ByteLevel"
    )


# ---------------------------------------------------------------------------------------------
# Export


@dataclass
class _Source(abc.ABC):
    """Where the platform's tensors come from: names, shapes, dtypes, and a reader for a group."""

    specs: dict[str, tuple[torch.dtype, tuple[int, ...]]]
    config: LlamaConfig
    provenance: dict[str, Any]

    @abc.abstractmethod
    def read(self, keys: list[str]) -> Iterator[tuple[str, torch.Tensor]]:
        """The tensors of ``keys``, in that order, one at a time."""


class _DictSource(_Source):
    def __init__(self, state: Mapping[str, torch.Tensor], config: LlamaConfig):
        from torch.distributed.tensor import DTensor

        self.state = {_strip(k): v for k, v in state.items()}
        for k, v in self.state.items():
            if isinstance(v, DTensor):
                raise HFFormatError(f"state dict {k} is a DTensor; export a full state dict or a checkpoint directory")
        super().__init__(
            {k: (v.dtype, tuple(v.shape)) for k, v in self.state.items()}, config, {"source": "state_dict"}
        )

    def read(self, keys: list[str]) -> Iterator[tuple[str, torch.Tensor]]:
        for k in keys:
            yield k, self.state[k]


class _CheckpointSource(_Source):
    """A platform checkpoint (verified first, as the serving loader does): a sharded (DCP) one
    is read one output shard's tensors at a time, a single-writer one memory-mapped."""

    def __init__(self, path: str):
        from workloads.common import checkpoint as ckpt

        checked = ckpt.load(path, keys=[])  # verifies every file against the manifest
        # The architecture as the serving loader reads it (workloads.inference.loading.model_config_of).
        if not isinstance(checked.meta.get("model_config"), dict):
            raise HFFormatError(
                f"{path}: meta.json holds no model config (looked for model_config); keys: {sorted(checked.meta)}"
            )
        config = config_from_dict(checked.meta["model_config"])
        if not isinstance(config, LlamaConfig):
            raise HFFormatError(
                f"{path}: model_config.arch is 'gpt'; allowed: 'llama' (Hugging Face's LlamaForCausalLM)"
            )
        self.path, self.format = path, checked.format
        with open(os.path.join(path, ckpt.MANIFEST), "rb") as f:
            manifest_sha = hashlib.sha256(f.read()).hexdigest()
        provenance = {"checkpoint": os.path.abspath(path), "step": checked.step, "manifest_sha256": manifest_sha}
        if checked.format == ckpt.SHARDED_FORMAT:
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.metadata import TensorStorageMetadata

            self.reader = dcp.FileSystemReader(path)
            meta = self.reader.read_metadata().state_dict_metadata
            specs = {}
            for k, v in meta.items():
                if k.startswith("model.") and isinstance(v, TensorStorageMetadata):
                    specs[_strip(k.removeprefix("model."))] = (v.properties.dtype, tuple(v.size))
            self.mapped: dict[str, torch.Tensor] = {}
        else:
            self.mapped = torch.load(os.path.join(path, "model.pt"), map_location="cpu", mmap=True, weights_only=True)
            self.mapped = {_strip(k): v for k, v in self.mapped.items()}
            specs = {k: (v.dtype, tuple(v.shape)) for k, v in self.mapped.items()}
        super().__init__(specs, config, provenance)

    def read(self, keys: list[str]) -> Iterator[tuple[str, torch.Tensor]]:
        if self.mapped:
            for k in keys:
                yield k, self.mapped[k]
            return
        import torch.distributed.checkpoint as dcp

        group = {k: torch.empty(self.specs[k][1], dtype=self.specs[k][0]) for k in keys}
        dcp.load({"model": group}, storage_reader=self.reader, no_dist=True)
        for k in keys:
            yield k, group.pop(k)


def _order(key: str) -> tuple[int, int, str]:
    m = _LAYER.match(key)
    if m:
        return (1, int(m.group(1)), m.group(2))
    return (0 if key == "tok_emb.weight" else 2, 0, key)


def _plan(specs: list[tuple[str, int]], max_shard_bytes: int) -> list[list[str]]:
    """Tensors in order, grouped into shards of at most ``max_shard_bytes`` (a larger tensor
    alone), as transformers' ``save_pretrained`` does."""
    shards: list[list[str]] = [[]]
    size = 0
    for key, nbytes in specs:
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(key)
        size += nbytes
    return shards


def _token_of(tokenizer: dict[str, Any], token_id: int | None) -> str | None:
    if token_id is None:
        return None
    for added in tokenizer.get("added_tokens", []):
        if added.get("id") == token_id:
            return str(added["content"])
    for text, i in (tokenizer.get("model", {}).get("vocab") or {}).items():
        if i == token_id:
            return str(text)
    raise HFFormatError(f"tokenizer.json: token id {token_id} is not in its vocabulary or added tokens")


def _hash_copy(src: str, dst: str) -> dict[str, Any]:
    sha, size = hashlib.sha256(), 0
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while chunk := fin.read(_CHUNK):
            fout.write(chunk)
            sha.update(chunk)
            size += len(chunk)
        fout.flush()
        os.fsync(fout.fileno())
    return {"size": size, "sha256": sha.hexdigest()}


def _write_json(path: str, data: Any) -> dict[str, Any]:
    raw = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
    with open(path, "wb") as f:
        f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    return {"size": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def export_hf(
    source: Mapping[str, torch.Tensor] | str,
    out_dir: str,
    *,
    config: LlamaConfig | None = None,
    tokenizer_files: list[str],
    max_shard_bytes: int,
    dtype: torch.dtype | None = None,
    bos_token_id: int | None = None,
    eos_token_id: int | list[int] | None = None,
) -> dict[str, Any]:
    """Write a Hugging Face ``LlamaForCausalLM`` folder in ``out_dir`` (absent or empty) from
    ``source``: the platform's state dict (``config`` required) or a checkpoint directory
    (verified; its meta's model config). Files: safetensors shards of at most
    ``max_shard_bytes`` each (a larger tensor alone) and ``model.safetensors.index.json``,
    ``config.json``, ``generation_config.json``, ``tokenizer_files`` copied in (a
    ``tokenizer_config.json`` for ``PreTrainedTokenizerFast`` is written when none is given),
    then ``manifest.json`` (size and sha256 of every file) last, atomically.

    Streams: a checkpoint is read one output shard's tensors at a time, each tensor is renamed,
    permuted and cast on its own and written as it comes, so the export holds at most one
    shard's source tensors and one converted tensor. ``dtype``: of the written weights (the
    source's when None). Returns the manifest."""
    if max_shard_bytes <= 0:
        raise HFFormatError(f"max_shard_bytes is {max_shard_bytes}; allowed: a positive number of bytes")
    if isinstance(source, str):
        src: _Source = _CheckpointSource(source)
        if config is not None and config != src.config:
            raise HFFormatError(f"{source}: config given ({config}) differs from the checkpoint's ({src.config})")
    else:
        if config is None:
            raise HFFormatError("export_hf: config is required when the source is a state dict")
        src = _DictSource(source, config)
    config = src.config
    expected = _expected_shapes(config)
    if set(src.specs) != set(expected):
        missing, extra = sorted(set(expected) - set(src.specs)), sorted(set(src.specs) - set(expected))
        raise HFFormatError(f"export source does not match its config: missing {missing[:5]}, unexpected {extra[:5]}")
    for key, (_, shape) in src.specs.items():
        if shape != expected[key]:
            raise HFFormatError(f"export source: {key} is {shape}, the config's model needs {expected[key]}")
    dtypes = {d for d, _ in src.specs.values()}
    out_dtype = dtype or (dtypes.pop() if len(dtypes) == 1 else torch.float32)
    if out_dtype not in _ST_NAMES:
        raise HFFormatError(f"dtype is {out_dtype}; allowed: {', '.join(str(d) for d in DTYPE_NAMES)}")
    names = [os.path.basename(p) for p in tokenizer_files]
    for p in tokenizer_files:
        if not os.path.isfile(p):
            raise HFFormatError(f"tokenizer file {p} does not exist")
    if "tokenizer.json" not in names:
        raise HFFormatError(f"tokenizer_files are {names}; allowed: a list holding tokenizer.json")
    if os.path.exists(out_dir) and os.listdir(out_dir):
        raise HFFormatError(f"{out_dir} is not empty; export into a new directory")
    os.makedirs(out_dir, exist_ok=True)

    order = sorted(src.specs, key=_order)
    sizes = [(k, math.prod(expected[k]) * out_dtype.itemsize) for k in order]
    shards = _plan(sizes, max_shard_bytes)
    files: dict[str, dict[str, Any]] = {}
    weight_map: dict[str, str] = {}
    for i, keys in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        writer = _Writer(os.path.join(out_dir, fname), [(to_hf_name(k), out_dtype, expected[k]) for k in keys])
        try:
            for key, t in src.read(keys):
                converted = to_hf_tensor(key, t.to(device="cpu", dtype=out_dtype), config).contiguous()
                writer.add(to_hf_name(key), converted)
                del converted, t
        finally:
            files[fname] = writer.close()
        weight_map.update({to_hf_name(k): fname for k in keys})
    total = sum(n for _, n in sizes)
    files[INDEX] = _write_json(
        os.path.join(out_dir, INDEX),
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
    )
    files[CONFIG] = _write_json(
        os.path.join(out_dir, CONFIG),
        hf_config(config, bos_token_id=bos_token_id, eos_token_id=eos_token_id, dtype=out_dtype),
    )
    files[GENERATION_CONFIG] = _write_json(
        os.path.join(out_dir, GENERATION_CONFIG), generation_config(bos_token_id, eos_token_id)
    )
    for path, name in zip(tokenizer_files, names, strict=True):
        files[name] = _hash_copy(path, os.path.join(out_dir, name))
    if TOKENIZER_CONFIG not in names:
        with open(os.path.join(out_dir, "tokenizer.json")) as f:
            tok = json.load(f)
        eos_one = eos_token_id[0] if isinstance(eos_token_id, list) else eos_token_id
        tconf: dict[str, Any] = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": config.block_size,
            "clean_up_tokenization_spaces": False,
        }
        for field, token_id in (("bos_token", bos_token_id), ("eos_token", eos_one)):
            text = _token_of(tok, token_id)
            if text is not None:
                tconf[field] = text
        files[TOKENIZER_CONFIG] = _write_json(os.path.join(out_dir, TOKENIZER_CONFIG), tconf)
    manifest = {
        "format": EXPORT_FORMAT,
        "created_unix": time.time(),
        "source": src.provenance,
        "dtype": DTYPE_NAMES[out_dtype],
        "files": dict(sorted(files.items())),
    }
    tmp = os.path.join(out_dir, f".{MANIFEST}.tmp")
    _write_json(tmp, manifest)
    os.replace(tmp, os.path.join(out_dir, MANIFEST))
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return manifest


def _file_digest(path: str) -> dict[str, Any]:
    sha, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": sha.hexdigest()}


def verify_export(out_dir: str) -> list[str]:
    """Check every file of an export against its ``manifest.json`` (size, then sha256); return
    the files checked. Raises ``HFFormatError`` naming the first file that differs."""
    path = os.path.join(out_dir, MANIFEST)
    if not os.path.isfile(path):
        raise HFFormatError(f"{path}: no manifest.json; the export is incomplete (it is written last)")
    with open(path) as f:
        manifest = json.load(f)
    if manifest.get("format") != EXPORT_FORMAT:
        raise HFFormatError(f"{path}: format is {manifest.get('format')!r}; allowed: {EXPORT_FORMAT!r}")
    for name, want in manifest["files"].items():
        fp = os.path.join(out_dir, name)
        if not os.path.isfile(fp):
            raise HFFormatError(f"{fp}: listed in manifest.json but missing")
        got = _file_digest(fp)
        if got["size"] != want["size"]:
            raise HFFormatError(f"{fp}: {got['size']} bytes, manifest.json says {want['size']}")
        if got["sha256"] != want["sha256"]:
            raise HFFormatError(f"{fp}: sha256 {got['sha256']}, manifest.json says {want['sha256']}")
    return sorted(manifest["files"])
