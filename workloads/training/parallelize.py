"""The model's parallelization: the job's model built on this rank and sharded, FSDP2 (each
decoder block, then the root) or DDP for small models.

Its settings slice: ``seed``, ``sharding``, ``precision``, ``activation_checkpointing`` (and the
model's config). No pydantic: the benchmarks build their models here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import torch
    from torch import nn

    from config.job_settings import JobSettings
    from workloads.common.model import GPT, GPTConfig, Llama, LlamaConfig


def shard_model(
    model: GPT | Llama, *, sharding: str, device: torch.device, precision: str, activation_checkpointing: bool
) -> nn.Module:
    """FSDP2 (each decoder block, then the root) or DDP. bf16 compute with fp32 gradient
    reduction under FSDP's MixedPrecisionPolicy; the fp32 parameters stay the sharded master."""
    import torch

    model.activation_checkpointing = activation_checkpointing
    if sharding == "ddp":
        import ray.train.torch

        return ray.train.torch.prepare_model(model)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from workloads.common import model as model_lib

    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if precision == "bf16" and device.type == "cuda"
        else MixedPrecisionPolicy()
    )
    # fully_shard moves each block's parameters and buffers to the device as it shards them (the
    # mesh's device: the GPU Ray Train assigned), so the whole model never sits on one GPU.
    for block in model.layers if isinstance(model, model_lib.Llama) else model.blocks:
        fully_shard(block, mp_policy=mp)
    # fully_shard returns the module it was given (its class swapped for an FSDP subclass).
    return cast("nn.Module", fully_shard(model, mp_policy=mp))


def build_model(
    model_config: GPTConfig | LlamaConfig,
    *,
    seed: int,
    sharding: str,
    device: torch.device,
    precision: str,
    activation_checkpointing: bool,
    initialize: bool = True,
) -> nn.Module:
    """The job's model on this rank, with the same initial weights on every rank and at every
    world size (those of ``torch.manual_seed(seed); build(model_config)``).

    FSDP: built on the meta device (no memory), sharded, then each rank allocates and
    initialises only its own shards (``init_parameters`` draws one whole tensor at a time), so
    a model larger than one worker's memory never exists whole on any worker. DDP: built whole
    on every rank, as DDP keeps it. ``initialize=False`` (FSDP, a resume that loads every
    parameter next): the shards are allocated but not drawn."""
    import torch

    from workloads.common import model as model_lib

    if sharding != "fsdp":
        torch.manual_seed(seed)
        return shard_model(
            model_lib.build(model_config),
            sharding=sharding,
            device=device,
            precision=precision,
            activation_checkpointing=activation_checkpointing,
        )
    with torch.device("meta"):
        built = model_lib.build(model_config)
    # The same module, sharded in place: ``built`` keeps its GPT or Llama type for the calls below.
    model = shard_model(
        built, sharding=sharding, device=device, precision=precision, activation_checkpointing=activation_checkpointing
    )
    model.to_empty(device=device)
    if initialize:
        model_lib.init_parameters(built, seed)
    elif isinstance(built, model_lib.Llama):
        built.reset_buffers()  # not in checkpoints
    return model


def build_from_settings(
    s: JobSettings, model_config: GPTConfig | LlamaConfig, device: torch.device, *, initialize: bool
) -> nn.Module:
    """``build_model`` with the job's settings slice: ``seed``, ``sharding``, ``precision``,
    ``activation_checkpointing``."""
    return build_model(
        model_config,
        seed=s.seed,
        sharding=s.sharding,
        device=device,
        precision=s.precision,
        activation_checkpointing=s.activation_checkpointing,
        initialize=initialize,
    )


def init_from_hf(model: nn.Module, folder: str, *, process_group: object) -> dict[str, str]:
    """Fill the job's (sharded) model from the Hugging Face ``folder`` (``training.init_from``):
    each rank reads only its own rows (``hf_llama.load_hf_into`` over ``process_group``, every
    rank of the run). Returns what the checkpoints' meta records: the folder and its digest. A
    folder of another shape than the job's model stops the start, naming both."""
    from workloads.common import hf_llama

    target = getattr(model, "module", model)  # DDP wraps the model; FSDP2 is the model itself
    try:
        digest = hf_llama.load_hf_into(target, folder, process_group=process_group)
    except (hf_llama.HFFormatError, OSError) as err:
        raise ValueError(f"training.init_from: {err}") from err
    return {"path": folder, "digest": digest}


def initial_weights(
    model: nn.Module, init_from: str | None, resumed_meta: dict[str, Any] | None, *, process_group: object
) -> dict[str, str] | None:
    """Where the run's weights came from, after ``Checkpointer.restore``: a resumed run
    (``resumed_meta``, its checkpoint's meta) keeps its checkpoint's weights and ``init_from``
    record and reads nothing; a fresh one with ``init_from`` loads that folder (``init_from_hf``);
    otherwise the seed's weights stay (None)."""
    if resumed_meta is not None:
        return resumed_meta.get("init_from")
    if init_from is None:
        return None
    return init_from_hf(model, init_from, process_group=process_group)
