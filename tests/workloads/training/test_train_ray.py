"""The training job on a real local Ray cluster (head + 2 worker nodes): S3 storage, exact
resume after a worker crash, fallback from a torn checkpoint, node loss."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from tests.workloads.conftest import S3_BUCKET
from workloads.common import checkpoint as ck
from workloads.common import storage
from workloads.training import settings as S
from workloads.training.job import check_cluster, run

pytestmark = pytest.mark.slow

STEPS, EVERY = 40, 10
COMMON = {"steps": STEPS, "checkpoint_every_steps": EVERY, "report_every_steps": EVERY,
          "warmup_steps": 5, "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
          "batch_size_per_worker": 4, "data_max_bytes": 1 << 20, "max_failures": 2,
          "storage_shared": True}


def _settings(storage_path, run_name, **extra):
    return S.for_local({**COMMON, "run_name": run_name, **extra}, storage_path=storage_path)


def _final(storage_path, run_name):
    fs, base = storage.filesystem_for(storage_path)
    return ck.load_latest_valid(base, run_name, filesystem=fs)


def _assert_same_training_state(a, b):
    assert a.step == b.step == STEPS
    ma, mb = a.state["model"], b.state["model"]
    assert ma.keys() == mb.keys()
    for k in ma:
        assert torch.equal(ma[k], mb[k]), f"weights differ in {k}"  # bitwise
    oa, ob = a.state["optimizer"]["state"], b.state["optimizer"]["state"]
    for k in oa:
        for name in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(oa[k][name], ob[k][name]), f"optimizer {name} of param {k} differs"
    assert a.meta["data_position"] == b.meta["data_position"]


@pytest.fixture(scope="module")
def reference(ray_cluster):
    """An uninterrupted run, stored on the local S3 server."""
    uri = f"s3://{S3_BUCKET}/runs"
    result = run(_settings(uri, "reference"))
    assert result.error is None
    return uri, result


def test_s3_storage(reference):
    uri, result = reference
    assert result.metrics["step"] == STEPS and result.metrics["resumed_from"] == 0
    steps = [s for s, _ in ck.list_checkpoints(f"{uri}", "reference")]
    # num_to_keep=3: Ray deleted the oldest; every kept one is intact on S3.
    assert steps == [40, 30, 20]
    fs, base = storage.filesystem_for(uri)
    for _, path in ck.list_checkpoints(base, "reference", filesystem=fs):
        assert ck.verify(path, filesystem=fs) == []
    assert result.checkpoint.path.endswith("reference/checkpoint_000000040")


def test_exact_resume_after_worker_crash(reference, tmp_path):
    marker = tmp_path / "crashed"
    s = _settings(str(tmp_path / "ckpt"), "crashy", fail_at_step=25, fail_rank=1, fail_marker=str(marker))
    result = run(s)
    assert marker.exists(), "the injected crash did not happen"
    assert result.error is None and result.metrics["step"] == STEPS
    assert result.metrics["resumed_from"] == 20  # the last checkpoint before the crash
    _assert_same_training_state(_final(str(tmp_path / "ckpt"), "crashy"), _final(reference[0], "reference"))

    # Tear the newest checkpoint and run the same job again: it detects the tear, resumes
    # from step 30 and ends with the same weights again.
    newest = tmp_path / "ckpt" / "crashy" / ck.dir_name(STEPS)
    with open(newest / "model.pt", "r+b") as f:
        f.truncate(1000)
    rerun = run(_settings(str(tmp_path / "ckpt"), "crashy"))
    assert rerun.error is None and rerun.metrics["resumed_from"] == 30
    _assert_same_training_state(_final(str(tmp_path / "ckpt"), "crashy"), _final(reference[0], "reference"))


def test_local_storage_on_multi_node_cluster_is_refused(ray_cluster, tmp_path):
    s = _settings(str(tmp_path), "x", storage_shared=False)
    assert check_cluster(s) == [
        f"training.storage_path: {str(tmp_path)!r} is local to each node, but the Ray cluster has "
        "2 worker nodes; use /fsx/... or s3://, or set training.storage_shared if every node sees this path"]


def test_node_loss_still_finishes(ray_cluster, tmp_path):
    """SIGKILL a whole worker node after the first checkpoint; the run resumes on the other."""
    s = _settings(str(tmp_path / "ckpt"), "nodeloss", steps=60, checkpoint_every_steps=10)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("result", run(s)), daemon=True)
    t.start()
    first = tmp_path / "ckpt" / "nodeloss" / ck.dir_name(10) / ck.MANIFEST
    deadline = time.monotonic() + 240
    while not first.exists() and time.monotonic() < deadline and t.is_alive():
        time.sleep(0.2)
    assert first.exists(), "no checkpoint was written"
    ray_cluster.kill_node(2)
    try:
        t.join(timeout=300)
        assert not t.is_alive(), "the run did not finish after the node loss"
        result = box["result"]
        assert result.error is None and result.metrics["step"] == 60
        assert result.metrics["resumed_from"] >= 10
    finally:
        ray_cluster.add_worker()
