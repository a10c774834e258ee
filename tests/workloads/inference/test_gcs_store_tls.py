"""What the head's GCS asks of the TLS store it keeps its tables in (ElastiCache with in-transit
encryption; ``inference.gcs_fault_tolerance``), with the real Ray GCS and a real TLS-only
``redis-server``.

On the cluster the head dials the ExternalName Service's name while ElastiCache's certificate
names the cache's endpoint, and nothing tells Ray which CA to trust (KubeRay sets no
RAY_REDIS_CA_CERT). So the GCS must not check the host name, and must find the CA in the image's
default trust store (/etc/ssl/certs, from the ca-certificates package: workloads/Dockerfile).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from rigs.local_cluster import LocalCluster
from rigs.rehearse_serve_ha import Redis

pytestmark = [pytest.mark.slow, pytest.mark.ray_cluster]


def _head(redis: Redis, trust: dict[str, str]) -> LocalCluster:
    return LocalCluster(
        worker_nodes=0,
        dashboard=False,
        head_env={"RAY_REDIS_ADDRESS": redis.address, "RAY_external_storage_namespace": "tls-check", **trust},
        head_args_extra=["--redis-password", redis.password],
        temp_dir=tempfile.mkdtemp(prefix="rt", dir="/tmp"),  # short: Ray's socket paths
        remove_temp_dir=False,
    )


def test_the_gcs_trusts_the_default_store_and_not_the_host_name():
    redis = Redis.start()
    clusters: list[LocalCluster] = []
    try:
        # Dialled at 127.0.0.1, the certificate names gcs-store.example: no host-name check.
        trusted = _head(redis, redis.trust_env())
        clusters.append(trusted)
        trusted.start(timeout_s=90)
        assert redis.keys() > 0  # the GCS wrote its tables to the store, over TLS
        trusted.stop()

        # The same store and head, but the default trust store does not hold the store's CA.
        untrusted = _head(redis, {})
        clusters.append(untrusted)
        with pytest.raises(RuntimeError, match="ray head exited"):
            untrusted.start(timeout_s=90)
        assert "CERTIFICATE_VERIFY_FAILED" in (Path(untrusted.temp_dir or "") / "head.log").read_text()
    finally:
        for cluster in clusters:
            cluster.stop()
            shutil.rmtree(cluster.temp_dir or "", ignore_errors=True)
        redis.stop()
