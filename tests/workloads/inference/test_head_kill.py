"""The generation service survives losing its Ray head (GCS fault tolerance, real Ray and a real
``redis-server``): the short variant of ``make rehearse-serve-ha``."""

from __future__ import annotations

import pytest

from rigs import rehearse_serve_ha as rehearse_ha

pytestmark = pytest.mark.ray_cluster


def test_requests_survive_a_head_kill_and_the_service_is_whole_again(tmp_path):
    rehearse_ha.tiny_checkpoint(tmp_path, "tiny-run")
    s = rehearse_ha.rehearse(
        env_name="dev",
        storage=tmp_path,
        run="tiny-run",
        concurrency=2,
        time_limit_s=90,
        kill_after=20,
        head_down_s=0,
        tail_s=1,
        # The full rehearsal (make rehearse-serve-ha) also makes a new deployment afterwards.
        new_deployment=False,
        max_tokens=4,
        log=print,  # shown when the test fails
    )
    assert s["keys_in_store"] > 0  # the GCS wrote its tables to Redis before the kill
    # Requests sent while the head was down: the worker's proxy and replicas kept serving.
    during = [r for r in s["records"] if s["kill_t_s"] <= r.start_s <= s["head_up_t_s"]]
    assert during and all(r.status == 200 for r in during)
    assert max(r.start_s for r in s["records"]) > s["serve_whole_t_s"]  # the load spanned the recovery
    assert s["failed"] == 0, s["errors"]
    assert s["replicas_kept"]  # the same replica processes, recovered rather than restarted
    # Whole again: controller back, both replicas RUNNING, serving 20 more requests.
    assert s["after_ok"] == s["after_sent"] == 20
