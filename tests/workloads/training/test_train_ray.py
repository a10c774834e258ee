"""The training job on a real local Ray cluster (head + 2 worker nodes): S3 storage, exact
resume after a worker crash, fallback from a torn checkpoint, node loss."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

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
def reference(ray_cluster, s3_bucket):
    """An uninterrupted run, stored on the local S3 server."""
    uri = f"s3://{s3_bucket}/runs"
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


def test_local_storage_on_multi_node_cluster_is_refused(ray_cluster, tmp_path):
    s = _settings(str(tmp_path), "x", storage_shared=False)
    assert check_cluster(s) == [
        f"training.storage_path: {str(tmp_path)!r} is local to each node, but the Ray cluster has "
        "2 worker nodes; use /fsx/... or s3://, or set training.storage_shared if every node sees this path"]


@pytest.fixture(scope="module")
def node_loss_run(ray_cluster, reference, tmp_path_factory):
    """SIGKILL a whole worker node after the first checkpoint; the run resumes on the other."""
    storage_path = str(tmp_path_factory.mktemp("nodeloss"))
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("result", run(_settings(storage_path, "nodeloss"))),
                         daemon=True)
    t.start()
    first = f"{storage_path}/nodeloss/{ck.dir_name(EVERY)}/{ck.MANIFEST}"
    deadline = time.monotonic() + 240
    while not os.path.exists(first) and time.monotonic() < deadline and t.is_alive():
        time.sleep(0.1)
    assert os.path.exists(first), "no checkpoint was written"
    ray_cluster.kill_node(2)
    try:
        t.join(timeout=300)
        assert not t.is_alive(), "the run did not finish after the node loss"
    finally:
        ray_cluster.add_worker()
    return storage_path, box["result"]


def test_node_loss_still_finishes(node_loss_run):
    _, result = node_loss_run
    assert result.error is None and result.metrics["step"] == STEPS
    assert result.metrics["resumed_from"] >= EVERY  # it did resume, from a checkpoint


def test_exact_resume_after_node_loss(node_loss_run, reference):
    """Killed mid-way and resumed: bitwise the same weights and optimizer state as the
    uninterrupted reference (gloo's 2-rank allreduce sums in a fixed order, so no 1e-6 needed)."""
    storage_path, _ = node_loss_run
    _assert_same_training_state(_final(storage_path, "nodeloss"), _final(reference[0], "reference"))


def test_torn_newest_checkpoint_falls_back_on_rerun(node_loss_run, reference):
    """Truncate the newest checkpoint and resubmit the same run: it detects the tear, resumes
    from the previous checkpoint and ends with the same weights again."""
    storage_path, _ = node_loss_run
    newest = f"{storage_path}/nodeloss/{ck.dir_name(STEPS)}/model.pt"
    with open(newest, "r+b") as f:
        f.truncate(1000)
    rerun = run(_settings(storage_path, "nodeloss"))
    assert rerun.error is None and rerun.metrics["resumed_from"] == STEPS - EVERY
    _assert_same_training_state(_final(storage_path, "nodeloss"), _final(reference[0], "reference"))


PROBE = """
import ray
ray.init(address=ADDRESS, log_to_driver=False)
@ray.remote
def ip():
    return ray.util.get_node_ip_address()
print(ray.util.get_node_ip_address(), ray.get(ip.remote()), sorted({n["NodeManagerAddress"] for n in ray.nodes()}))
ray.shutdown()
"""
# A process that starts a local cluster and drives it, like every bench and rehearsal entry
# point: without the offline hook on its PYTHONPATH. Then a driver started with the cluster's
# env (as a job's driver is). A driver that cannot reach the GCS retries for minutes, so a
# watchdog stops the cluster and exits.
STARTER = """
import os, subprocess, sys, threading
from workloads.common.local_cluster import LocalCluster
c = LocalCluster(worker_nodes=1, cpus_per_node=1, memory_per_node_mib=1024,
                 object_store_per_node_mib=256, dashboard=False).start()
threading.Timer(100, lambda: (print("driver hung", flush=True), c.stop(), os._exit(3))).start()
rc = 1
try:
    probe = PROBE.replace("ADDRESS", repr(c.address))
    exec(probe, {})
    child = subprocess.run([sys.executable, "-c", probe], env=c.env(), capture_output=True, text=True, timeout=90)
    print(child.stdout.strip().splitlines()[-1] if child.returncode == 0 else "child failed: " + child.stderr[-1500:])
    rc = 0
finally:
    c.stop()
    sys.stdout.flush()
    os._exit(rc)
"""


def test_local_cluster_traffic_stays_on_loopback():
    """Drivers, actors and nodes of a local cluster use 127.0.0.1, not the host's interface."""
    import subprocess
    import sys

    from workloads.common.local_cluster import REPO_ROOT

    # The test process has the hook applied by conftest; the process we start must not.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    code = f"PROBE = {PROBE!r}\n" + STARTER
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=180, cwd=str(REPO_ROOT))
    assert out.returncode == 0, out.stdout[-1000:] + out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-2:] == ["127.0.0.1 127.0.0.1 ['127.0.0.1']"] * 2, out.stdout[-2000:]
