"""The model's parallelization: the job's model built on this rank and sharded, FSDP2 (each
decoder block, then the root) or DDP for small models.

Its settings slice: ``seed``, ``sharding``, ``precision``, ``activation_checkpointing`` (and
``activation_checkpointing_every``), ``compile``, ``float8``, ``fsdp_reshard_after_forward``,
``fsdp_prefetch_blocks`` (and the model's config). No pydantic: the benchmarks build their models here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import torch
    from torch import nn

    from config.job_settings import JobSettings
    from workloads.common.model import GPT, GPTConfig, Llama, LlamaConfig


def checkpoint_mode(activation_checkpointing: bool | str) -> str:
    """``training.activation_checkpointing`` as none, selective or full (true/false: full/none)."""
    if isinstance(activation_checkpointing, bool):
        return "full" if activation_checkpointing else "none"
    return activation_checkpointing


def float8_filter(module: nn.Module, fqn: str) -> bool:
    """The linear layers float8 training converts: the decoder blocks', not the output layer
    (``head``, left in bf16 as torchtitan does: its logits feed the loss directly)."""
    return fqn != "head" and not fqn.endswith(".head")


def convert_float8(model: nn.Module) -> nn.Module:
    """torchao's float8 training (tensorwise scaling) of ``float8_filter``'s linear layers, with
    float8 all-gather under FSDP2: the sharded weights are cast to float8 before the all-gather,
    halving its bytes against bf16. CUDA only (FP8 Tensor Cores)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = Float8LinearConfig(enable_fsdp_float8_all_gather=True)
    converted: nn.Module = convert_to_float8_training(model, config=config, module_filter_fn=float8_filter)
    return converted


def shard_model(
    model: GPT | Llama,
    *,
    sharding: str,
    device: torch.device,
    precision: str,
    activation_checkpointing: bool | str,
    checkpoint_every: int = 1,
    compile: bool = False,
    float8: bool = False,
    reshard_after_forward: bool = True,
    prefetch_blocks: int = 0,
) -> nn.Module:
    """FSDP2 (each decoder block, then the root) or DDP, in torchtitan's order: float8 conversion
    (CUDA only), activation checkpointing (the model's forward: every block, or every
    ``checkpoint_every``-th with selective), ``torch.compile`` of each block in place (its
    parameter names unchanged, so checkpoints load either way), then FSDP. bf16 compute with fp32
    gradient reduction under FSDP's MixedPrecisionPolicy; the fp32 parameters stay the sharded
    master."""
    import torch

    from workloads.common import model as model_lib

    mode = checkpoint_mode(activation_checkpointing)
    model.activation_checkpointing = mode != "none"
    model.checkpoint_every = checkpoint_every if mode == "selective" else 1
    if float8 and device.type == "cuda":
        convert_float8(model)
    blocks = list(model.layers if isinstance(model, model_lib.Llama) else model.blocks)
    if compile:
        for block in blocks:
            block.compile()
    if sharding == "ddp":
        import ray.train.torch

        return ray.train.torch.prepare_model(model)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if precision == "bf16" and device.type == "cuda"
        else MixedPrecisionPolicy()
    )
    # fully_shard moves each block's parameters and buffers to the device as it shards them (the
    # mesh's device: the GPU Ray Train assigned), so the whole model never sits on one GPU.
    for i, block in enumerate(blocks):
        # The last block's parameters are needed again at once by backward (torchtitan does not
        # reshard it either).
        fully_shard(block, mp_policy=mp, reshard_after_forward=reshard_after_forward and i < len(blocks) - 1)
    # fully_shard returns the module it was given (its class swapped for an FSDP subclass).
    root = cast("nn.Module", fully_shard(model, mp_policy=mp, reshard_after_forward=reshard_after_forward))
    if prefetch_blocks:
        # Explicit prefetching: each block all-gathers the next n in forward, the previous n in backward.
        for i, block in enumerate(blocks):
            block.set_modules_to_forward_prefetch(blocks[i + 1 : i + 1 + prefetch_blocks])  # type: ignore[operator]
            block.set_modules_to_backward_prefetch(blocks[max(0, i - prefetch_blocks) : i][::-1])  # type: ignore[operator]
    return root


def build_model(
    model_config: GPTConfig | LlamaConfig,
    *,
    seed: int,
    sharding: str,
    device: torch.device,
    precision: str,
    activation_checkpointing: bool | str,
    initialize: bool = True,
    **knobs: Any,
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
            **knobs,
        )
    with torch.device("meta"):
        built = model_lib.build(model_config)
    # The same module, sharded in place: ``built`` keeps its GPT or Llama type for the calls below.
    model = shard_model(
        built,
        sharding=sharding,
        device=device,
        precision=precision,
        activation_checkpointing=activation_checkpointing,
        **knobs,
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
        checkpoint_every=s.activation_checkpointing_every,
        compile=s.compile,
        float8=s.float8,
        reshard_after_forward=s.fsdp_reshard_after_forward,
        prefetch_blocks=s.fsdp_prefetch_blocks,
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
