"""A job whose log follower is cut mid-run keeps running and finishes, on a real local Ray cluster.

This is what the RayJob's HTTPMode relies on (manifests/training.py): KubeRay submits
through the dashboard's Jobs API and polls the job's status; no `ray job submit --follow`
process is tied to the job's fate, so a dropped log stream (here: the follower SIGKILLed) does
not touch the Ray job, which Ray runs to SUCCEEDED.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.timeout(300), pytest.mark.ray_cluster]

# After step 3 the job waits for the test to cut the follower (the file ``cut`` appears), so that
# it is certainly running when its log stream drops, however slowly the follower started.
JOB = (
    "import os, sys, time\n"
    "for i in range(40):\n"
    "    print(f'step {i}', flush=True)\n"
    "    while i == 3 and not os.path.exists(sys.argv[1]):\n"
    "        time.sleep(0.1)\n"
    "    time.sleep(0.05)\n"
    "print('TRAIN finished', flush=True)\n"
)


def test_cut_log_follower_does_not_stop_the_job(tmp_path):
    from ray.job_submission import JobStatus, JobSubmissionClient

    from rigs.local_cluster import LocalCluster

    script, cut = tmp_path / "job.py", tmp_path / "cut"
    script.write_text(JOB)
    with LocalCluster(
        worker_nodes=1, cpus_per_node=1, memory_per_node_mib=1024, object_store_per_node_mib=256
    ) as cluster:
        client = JobSubmissionClient(cluster.dashboard_url)
        job_id = client.submit_job(
            entrypoint=f"{sys.executable} {script} {cut}", runtime_env={"env_vars": {"RAY_USAGE_STATS_ENABLED": "0"}}
        )
        follower = subprocess.Popen(
            [
                os.path.join(os.path.dirname(sys.executable), "ray"),
                "job",
                "logs",
                "--follow",
                "--address",
                cluster.dashboard_url,
                job_id,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=cluster.env(),
            start_new_session=True,
        )
        seen = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = follower.stdout.readline()
            seen.append(line)
            if line.startswith("step 3"):
                break
        assert any(s.startswith("step 3") for s in seen), "".join(seen)[-2000:]
        os.killpg(follower.pid, signal.SIGKILL)  # the log stream drops mid-run
        follower.wait(timeout=30)
        assert client.get_job_status(job_id) == JobStatus.RUNNING
        cut.touch()
        deadline = time.monotonic() + 120
        while client.get_job_status(job_id) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            assert time.monotonic() < deadline, "the job did not finish"
            time.sleep(0.5)
        assert client.get_job_status(job_id) == JobStatus.SUCCEEDED
        logs = client.get_job_logs(job_id)
        assert "step 39" in logs and "TRAIN finished" in logs
