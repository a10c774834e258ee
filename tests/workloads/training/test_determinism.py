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
