"""What ``run`` refuses before anything starts (no Ray): a run whose newest checkpoint is in the
earlier single-writer format (``hpray-checkpoint/1``: one ``torch.save`` file per entry), which
the sharded job cannot resume."""

from __future__ import annotations

import pytest
import torch

from config import ConfigError
from workloads.common import checkpoint as ck
from workloads.common.model import LlamaConfig
from workloads.training import settings as S
from workloads.training.job import check_resume, run


def _old_checkpoint(storage, step: int) -> str:
    path = storage / "old" / ck.dir_name(step)
    ck.save(
        str(path),
        {"model": {"w": torch.zeros(2)}, "optim": {}},
        {"step": step, "model_config": LlamaConfig().to_dict()},
    )
    return str(path)


def test_old_format_checkpoint_is_refused_before_start(tmp_path):
    _old_checkpoint(tmp_path, 10)
    newest = _old_checkpoint(tmp_path, 20)
    (tmp_path / "old" / ck.dir_name(30)).mkdir()  # torn (no manifest): skipped, as loading would
    s = S.for_local({"run_name": "old"}, storage_path=str(tmp_path))
    expected = (
        f"training.run_name: run 'old' has a checkpoint in format 'hpray-checkpoint/1' ({newest}), which "
        "this job cannot resume; allowed: 'hpray-checkpoint/2-dcp' checkpoints (sharded, written by this "
        "job), or a new run_name"
    )
    assert check_resume(s) == [expected]
    with pytest.raises(ConfigError) as err:
        run(s)
    assert err.value.errors == [expected]


def test_a_new_run_name_is_not_refused(tmp_path):
    _old_checkpoint(tmp_path, 10)
    assert check_resume(S.for_local({"run_name": "new"}, storage_path=str(tmp_path))) == []
