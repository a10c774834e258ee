"""rigs/local_cluster.py: the environment its Ray nodes and drivers get."""

from rigs import local_cluster


def test_nodes_state_rays_authentication_mode():
    """Unset, `ray start --head` turns token mode on when ~/.ray/auth_token exists and
    `ray start --address` does not: the worker nodes were refused (InvalidAuthToken)."""
    assert local_cluster.offline_env({})["RAY_AUTH_MODE"] == "disabled"


def test_a_rig_that_rehearses_token_mode_keeps_it():
    env = local_cluster.offline_env({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "t"})
    assert (env["RAY_AUTH_MODE"], env["RAY_AUTH_TOKEN"]) == ("token", "t")
