"""One local Ray cluster and one Serve deployment shared by the inference HTTP tests.

The checkpoint is a freshly initialised tiny GPT saved with the training checkpoint API (no
training): step 10 intact, step 20 torn (truncated model.pt), so the app must serve step 10.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rigs.serve_local import LocalCluster, free_port

TINY = {"block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 32}
RUN = "tiny-run"


def save_checkpoint(storage: Path, step: int, seed: int) -> Path:
    import torch

    from workloads.common import checkpoint as ckpt
    from workloads.common.model import GPT, GPTConfig

    torch.manual_seed(seed)
    cfg = GPTConfig(**TINY)
    model = GPT(cfg)
    path = storage / RUN / ckpt.dir_name(step)
    ckpt.save(str(path), {"model": model.state_dict()}, {"step": step, "model_config": cfg.to_dict()})
    return path


def tear(path: Path) -> None:
    model = path / "model.pt"
    data = model.read_bytes()
    model.write_bytes(data[: len(data) // 2])


@pytest.fixture(scope="session")
def make_checkpoint():
    return save_checkpoint


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> Path:
    storage = tmp_path_factory.mktemp("ckpts")
    save_checkpoint(storage, 10, seed=1)
    tear(save_checkpoint(storage, 20, seed=2))
    return storage


# Module scope: the cluster (and this process's Ray driver connection) is gone before the
# training tests start their own.
@pytest.fixture(scope="module")
def serve_app(checkpoints):
    """(base_url, deploy): the Generate app with 2 replicas on a head + 1 worker node cluster."""
    from config import load_environment
    from manifests import serve_config

    env = load_environment("dev")
    cluster = LocalCluster(worker_nodes=1, head_cpus=0, cpus_per_node=2, serve_env=serve_config.ray_env(env))
    cluster.start()
    try:
        port = free_port()

        def deploy(reload=None):
            serve_config.deploy(
                serve_config.local_deploy_config(
                    env,
                    port=port,
                    storage=str(checkpoints),
                    run_name=RUN,
                    replicas=2,
                    cpus=1,
                    reload=reload,
                    health_check_period_s=2,
                )
            )

        deploy()
        yield f"http://127.0.0.1:{port}", deploy, cluster
    finally:
        # No serve.shutdown(): it drains every replica and proxy gracefully (half a minute here)
        # for a cluster that stop() ends anyway, HAProxy included (its files are in the temp dir).
        cluster.stop()
