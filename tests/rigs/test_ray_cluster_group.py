"""The suite's rule for local Ray clusters (tests/conftest.py): only tests in the `ray_cluster`
xdist group start one, so that two never share the CPUs of a small machine."""

from __future__ import annotations

import pytest

from rigs.local_cluster import LocalCluster
from rigs.serve_local import LocalCluster as ServeCluster


@pytest.mark.parametrize("cluster", [LocalCluster, ServeCluster])
def test_a_test_outside_the_group_cannot_start_a_node(cluster, request):
    with pytest.raises(AssertionError) as err:
        cluster()._start("head", [])
    assert str(err.value) == (
        f"{request.node.nodeid} starts a local Ray cluster: mark it @pytest.mark.ray_cluster (tests/conftest.py)"
    )


@pytest.mark.ray_cluster
def test_a_marked_test_is_in_the_group(request):
    marks = [m.args for m in request.node.iter_markers("xdist_group")]
    assert marks == [("ray-cluster",)]
