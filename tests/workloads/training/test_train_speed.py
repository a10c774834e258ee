"""Issue 40 on CPU: compile, selective recomputation, gradient accumulation, float8's hardware
check, the shrink floor's sizing and the job's MFU."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.config.config_data import config_errors as errors_of
from workloads.common.model import Llama, LlamaConfig
from workloads.training.job import accumulate_step, lr_schedule, make_optimizer, train_step, train_step_with_norm


def _model(seed: int = 0) -> Llama:
    torch.manual_seed(seed)
    return Llama(LlamaConfig(n_layer=4, n_head=4, n_kv_head=2, n_embd=64, ffn_hidden=128, block_size=32))


def _opt(model):
    opt = make_optimizer(model, learning_rate=3e-3, weight_decay=0.1, fused=False)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule(2, 10))


def _batches(n: int, batch: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (batch, 33), generator=g) for _ in range(n)]


def test_selective_recomputation_gives_the_same_gradients_as_none():
    grads = []
    for mode in ("none", "selective", "full"):
        model = _model()
        model.activation_checkpointing = mode != "none"
        model.checkpoint_every = 2 if mode == "selective" else 1
        w = _batches(1, 2)[0]
        model(w[:, :-1], w[:, 1:])[1].backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for other in grads[1:]:
        # Recomputing a block reruns the same kernels on the same inputs: bitwise on CPU.
        assert all(torch.equal(a, b) for a, b in zip(grads[0], other, strict=True))


def test_accumulation_equals_the_larger_batch():
    """4 micro-batches of 2 against one batch of 8, 10 steps: the mean of equal slices' means is
    the batch mean, so only the summation order differs (fp32: within 1e-5 relative on the loss,
    2e-5 absolute on the weights)."""
    runs = []
    for micro in (1, 4):
        model = _model()
        opt, sched = _opt(model)
        losses, norms = [], []
        for w in _batches(10, 8):
            x, y = w[:, :-1], w[:, 1:]
            loss, norm = accumulate_step(model, opt, sched, x, y, micro_batches=micro, grad_clip=1.0)
            losses.append(loss.item())
            norms.append(norm.item())
        runs.append((losses, norms, model))
    (l1, n1, m1), (l4, n4, m4) = runs
    assert l1 == pytest.approx(l4, rel=1e-5)
    # The gradient norm (before clipping) is the accumulated gradient's, as one pass gives it.
    assert n1 == pytest.approx(n4, rel=1e-4)
    for a, b in zip(m1.parameters(), m4.parameters(), strict=True):
        assert torch.allclose(a, b, atol=2e-5)
    # One micro-batch is train_step itself: bitwise.
    model, ref = _model(), _model()
    (o1, s1), (o2, s2) = _opt(model), _opt(ref)
    w = _batches(1, 4)[0]
    a, a_norm = accumulate_step(model, o1, s1, w[:, :-1], w[:, 1:], micro_batches=1, grad_clip=1.0)
    b, b_norm = train_step_with_norm(ref, o2, s2, w[:, :-1], w[:, 1:], grad_clip=1.0)
    assert torch.equal(a, b)
    assert torch.equal(a_norm, b_norm)


def test_compiled_blocks_match_eager_over_10_steps():
    """Each block compiled in place (as parallelize.shard_model does) with inductor, which runs
    here (a C compiler is installed): the loss of 10 steps within 1e-4 relative of eager (fused
    kernels reorder fp32 sums), and the parameter names (checkpoints' keys) unchanged."""
    eager = _model()
    compiled = copy.deepcopy(eager)
    for block in compiled.layers:
        block.compile()
    assert [n for n, _ in compiled.named_parameters()] == [n for n, _ in eager.named_parameters()]
    losses = []
    for model in (eager, compiled):
        opt, sched = _opt(model)
        losses.append(
            [train_step(model, opt, sched, w[:, :-1], w[:, 1:], grad_clip=1.0).item() for w in _batches(10, 4)]
        )
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)


def test_float8_on_an_a10g_group_is_a_config_error():
    assert errors_of("dev", lambda d: d["training"].update(float8=True)) == [
        "training.float8: instance type ml.g5.12xlarge of instance group 'gpu-workers' has A10G GPUs, "
        "which have no FP8 Tensor Cores; allowed: float8 false, or a group of B200, B300, GB200, H100, "
        "H200, L4, L40S GPUs"
    ]


def test_a_global_batch_that_does_not_divide_at_the_shrink_floor_is_a_config_error():
    def mutate(d):
        d["training"].update(min_workers=1, global_batch_size=48, batch_size_per_worker=16, sharding="ddp")
        d["training"]["model"] = {"preset": "tiny"}

    assert errors_of("dev", lambda d: d["training"].update(global_batch_size=40)) == [
        "training.global_batch_size: 40 is not a multiple of workers x batch_size_per_worker (16) at 2 "
        "worker(s) (the run may resume on 2-2); allowed: a multiple of 32, or null"
    ]
    assert errors_of("dev", mutate) == [
        "training.global_batch_size: 48 is not a multiple of workers x batch_size_per_worker (16) at 2 "
        "worker(s) (the run may resume on 1-2); allowed: a multiple of 32, or null"
    ]


def test_the_reporter_computes_mfu_from_the_plans_figures():
    from workloads.training.reporter import Reporter

    r = Reporter.__new__(Reporter)
    r.gpus, r.peak_tflops_per_gpu, r.model_flops_per_token = 4, 1000.0, 1e9
    # 2e6 tokens/s over 4 GPUs: 5e5 per GPU x 1e9 FLOPs = 5e14 of 1e15.
    assert r.throughput(2e6) == {"tokens_per_s_per_gpu": 5e5, "mfu": 0.5}
    r.gpus = 0
    assert r.throughput(2e6) == {}


def test_the_shrink_floor_is_sized_like_the_full_size():
    from config import parse_environment
    from manifests.registry import plan_of
    from tests.config.config_data import env_data

    # Memory: one worker holds the whole sharded state (fits at 2 workers, not at 1).
    assert errors_of(
        "dev", lambda d: d["training"].update(min_workers=1, batch_size_per_worker=24, model={"preset": "llama-1b"})
    ) == [
        "training.min_workers: 1 (the shrink floor): llama-1b (0.97B parameters) needs about 22.2 GiB per GPU "
        "with fsdp over 1 workers (batch_size_per_worker 24, block_size 2048, activation_checkpointing full), "
        "but ml.g5.12xlarge has 24 GiB per A10G (85% usable: 20.4 GiB); allowed: a larger min_workers, a "
        "smaller preset, more workers with fsdp, a smaller batch"
    ]
    # Step time and checkpoint burst at the floor: the global batch held, a step on 1 worker takes
    # twice as long as on 2 (accumulation), the checkpoint's bytes are the same.
    data = env_data("dev")
    data["training"].update(min_workers=1, global_batch_size=32, batch_size_per_worker=16)
    plan = plan_of(parse_environment(data))
    full, floor = plan.checkpoint, plan.floor_checkpoint
    assert floor is not None and full is not None and floor.gpus == 1 and full.gpus == 2
    assert floor.step_seconds == pytest.approx(2 * full.step_seconds)
    assert floor.bytes == full.bytes


def test_float8_converts_the_blocks_linear_layers_but_not_the_output_layer():
    """torchao (pinned beside torch in requirements.lock) converts against the pinned torch on
    CPU; the float8 matmuls themselves need FP8 Tensor Cores (bench/gpu_checks.sh)."""
    from torchao.float8.float8_linear import Float8Linear

    from workloads.training.parallelize import convert_float8

    model = convert_float8(_model())
    assert isinstance(model.layers[0].attn.wq, Float8Linear) and isinstance(model.layers[3].mlp.w_up, Float8Linear)
    assert type(model.head) is torch.nn.Linear


def test_the_memory_estimate_follows_recomputation_prefetch_and_accumulation():
    from config.training import Training
    from sizing.training import memory_per_gpu

    base = {"model": {"preset": "llama-1b"}, "batch_size_per_worker": 4}
    act = {m: memory_per_gpu(Training(**base, activation_checkpointing=m), 8)["activations"] for m in ("none", "selective", "full")}  # fmt: skip
    assert act["full"] < act["selective"] < act["none"]
    # true/false, the field's earlier values, are full and none.
    assert Training(**base, activation_checkpointing=True).activation_checkpointing == "full"
    assert Training(**base, activation_checkpointing=False).activation_checkpointing == "none"
    blocks = [memory_per_gpu(Training(**base, fsdp_prefetch_blocks=n), 8)["unsharded_blocks"] for n in (0, 2)]
    assert blocks[1] == 2 * blocks[0]  # 4 blocks gathered instead of 2
    no_reshard = memory_per_gpu(Training(**base, fsdp_reshard_after_forward=False), 8)["unsharded_blocks"]
    assert no_reshard == 16 / 2 * blocks[0]  # every one of the 16 blocks
    held = Training(**base, global_batch_size=32)
    assert "accumulated_gradients" not in memory_per_gpu(held, 8)  # 32 = 8 x 4: one micro-batch
    assert memory_per_gpu(held, 4)["accumulated_gradients"] == 4 * held.model.parameters()
