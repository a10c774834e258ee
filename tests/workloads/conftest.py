"""Fixtures for workload tests: a real local Ray cluster (head + 2 worker nodes), a local
S3-compatible server (moto) on 127.0.0.1, and the usage-library stubs that keep every Ray
process on loopback.

Ports are picked free and each cluster has its own temp dir, so concurrent clusters (another
engineer's, a rehearsal) never collide; finalizers stop everything that was started, also on
failure.
"""

from __future__ import annotations

import logging
import os

import pytest

from rigs.local_cluster import LocalCluster, free_port

S3_BUCKET = "hpray-test-checkpoints"
# Faster node-loss detection for the local cluster (Ray defaults: 3 s x 5 misses): a killed node
# is dead after 10 checks a second apart. A live node must miss all of them, so a node starved of
# CPU for a few seconds (the suite on both cores beside a CPU hog) is not declared dead, which
# would end its actors (ActorUnavailableError) and, on the head, the head itself. Only the GCS
# reads these; see docs/workloads.md "Recovery settings" for what is safe on a real cluster.
FAST_DETECTION = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "10",
    "RAY_health_check_timeout_ms": "2000",
}


@pytest.fixture(scope="session", autouse=True)
def _offline_usage_lib():
    """Stub Ray's cloud-metadata probe and usage reporting in the test process itself, and keep
    its node-IP discovery on loopback (see rigs/_offline/sitecustomize.py)."""
    from ray._common.usage import usage_lib
    from ray._private import services

    saved = (
        usage_lib.get_cloud_from_metadata_requests,
        usage_lib.UsageReportClient.report_usage_data,
        services.node_ip_address_from_perspective,
    )
    usage_lib.get_cloud_from_metadata_requests = lambda *a, **k: "unknown"
    usage_lib.UsageReportClient.report_usage_data = lambda self, *a, **k: None
    services.node_ip_address_from_perspective = lambda *a, **k: "127.0.0.1"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    yield
    (
        usage_lib.get_cloud_from_metadata_requests,
        usage_lib.UsageReportClient.report_usage_data,
        services.node_ip_address_from_perspective,
    ) = saved


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on 127.0.0.1 with one bucket; yields the env that points clients at it."""
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"]).create_bucket(Bucket=S3_BUCKET)
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


@pytest.fixture(scope="session")
def s3_bucket(s3_server) -> str:
    """The bucket created on the local S3 server."""
    return S3_BUCKET


@pytest.fixture(scope="session")
def ray_cluster(s3_server):
    """Head (0 CPUs, runs the Train controller) + 2 worker nodes of 2 CPUs, driver connected."""
    import ray

    cluster = LocalCluster(
        worker_nodes=2,
        cpus_per_node=2,
        memory_per_node_mib=2560,
        object_store_per_node_mib=300,
        dashboard=False,
        env_extra={**s3_server, **FAST_DETECTION},
    )
    cluster.start()
    try:
        ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.stop()
