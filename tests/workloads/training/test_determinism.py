import os

import pytest
import torch

from workloads.training.determinism import CUBLAS_WORKSPACE_CONFIG, use_deterministic


@pytest.fixture
def restore(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.deterministic = before[1]


def test_on_asks_torch_and_cublas_for_deterministic_kernels(restore):
    use_deterministic(True)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE_CONFIG


def test_off_leaves_the_default_kernels(restore):
    use_deterministic(True)
    use_deterministic(False)
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.deterministic


def _dev_config(**training):
    import yaml

    from config import parse_environment
    from config.loader import CONFIG_DIR

    data = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())
    data["name"] = "dev"
    data["training"] = {**data.get("training", {}), **training}
    return parse_environment(data, source="dev.yaml")


def _rendered_settings(cfg) -> dict:
    import json
    import shlex

    from manifests.training import render

    return json.loads(shlex.split(render(cfg)["spec"]["entrypoint"])[-1])


def test_the_setting_reaches_the_jobs_entrypoint():
    """training.deterministic travels in the settings the RayJob's entrypoint hands the loop;
    off unless the config turns it on."""
    assert _rendered_settings(_dev_config())["deterministic"] is False
    assert _rendered_settings(_dev_config(deterministic=True))["deterministic"] is True


class _Called(Exception):
    pass


@pytest.mark.parametrize("enabled", [False, True])
def test_the_loop_sets_its_kernels_before_anything_else(monkeypatch, enabled):
    """train_func calls use_deterministic with the run's setting first, before it asks Ray
    Train for its context or touches a device."""
    import ray.train

    from workloads.training import determinism
    from workloads.training import settings as S
    from workloads.training.job import train_func

    calls = []

    def record(value):
        calls.append(value)
        raise _Called

    monkeypatch.setattr(determinism, "use_deterministic", record)
    monkeypatch.setattr(ray.train, "get_context", lambda: pytest.fail("get_context before use_deterministic"))
    s = S.for_local({"deterministic": enabled}, storage_path="/tmp/unused")
    with pytest.raises(_Called):
        train_func(s.to_dict())
    assert calls == [enabled]


def test_the_jobs_step_runs_with_deterministic_kernels(restore):
    """Every op of the job's step (forward, loss, backward, clipping, AdamW) has a deterministic
    kernel on the CPU: turning the setting on does not make the step raise, and two runs from
    the same seed give the same loss bitwise."""
    from workloads.common import model as model_lib
    from workloads.training.job import lr_schedule, make_optimizer, train_step

    use_deterministic(True)
    losses = []
    for _ in range(2):
        torch.manual_seed(0)
        model = model_lib.build(model_lib.config_from_dict({"arch": "llama", **_TINY}))
        opt = make_optimizer(model, learning_rate=1e-3, weight_decay=0.1, fused=False)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule(2, 10))
        x = torch.randint(0, 256, (2, _TINY["block_size"]))
        y = torch.randint(0, 256, (2, _TINY["block_size"]))
        losses.append([train_step(model, opt, sched, x, y, grad_clip=1.0).item() for _ in range(3)])
    assert losses[0] == losses[1]


_TINY = {"n_layer": 2, "n_head": 4, "n_kv_head": 2, "n_embd": 64, "ffn_hidden": 192, "block_size": 64}
