"""rigs/local_cluster.py: the environment its Ray nodes and drivers get."""

import pytest

from rigs import local_cluster


def test_nodes_state_rays_authentication_mode():
    """Unset, `ray start --head` turns token mode on when ~/.ray/auth_token exists and
    `ray start --address` does not: the worker nodes were refused (InvalidAuthToken)."""
    assert local_cluster.offline_env({})["RAY_AUTH_MODE"] == "disabled"


def test_a_rig_that_rehearses_token_mode_keeps_it():
    env = local_cluster.offline_env({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "t"})
    assert (env["RAY_AUTH_MODE"], env["RAY_AUTH_TOKEN"]) == ("token", "t")


@pytest.mark.ray_cluster
@pytest.mark.timeout(300)
def test_a_new_head_that_exits_before_registering_is_started_again(monkeypatch):
    """On a starved machine `ray start --head` can give up on its own registration and exit; the
    restart starts it again until its deadline, as the head pod's restart policy would."""
    with local_cluster.LocalCluster(worker_nodes=0, dashboard=False) as cluster:
        cluster.kill_head()
        good = cluster._head_args
        cluster._head_args = [*good, "--num-cpus=not-a-number"]  # this start exits at once
        starts = []
        real = cluster._start_new_head

        def start_new_head():
            node = real()
            starts.append(node)
            cluster._head_args = good
            return node

        monkeypatch.setattr(cluster, "_start_new_head", start_new_head)
        node = cluster.restart_head(timeout_s=120)
        assert len(starts) == 2 and starts[0].proc.poll() is not None
        assert node is starts[1] and node.proc.poll() is None and cluster.nodes[0] is node
