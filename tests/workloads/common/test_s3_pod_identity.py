"""What the workloads' S3 path gets from EKS Pod Identity, with the pinned pyarrow and boto3.

A local S3 (moto, authentication on) and a stand-in for the Pod Identity agent that issues
credentials living LIFETIME_S and revokes them at their Expiration (pod_identity_standin.py).
The pod's environment is what the Pod Identity webhook injects: only
``AWS_CONTAINER_CREDENTIALS_FULL_URI`` and ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``.

- Credentials fixed at start (what ``storage.s3_filesystem`` used to pass to pyarrow) are
  rejected once they expire: the server enforces expiry, so this test can fail.
- ``storage.s3_filesystem()`` (pyarrow's default chain, nothing passed) writes one object over
  several rotations and checkpoints copied there, read back through
  ``checkpoint.load_latest_valid``; boto3 reads them afterwards with the same environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rigs.local_cluster import free_ports

STANDIN = Path(__file__).with_name("pod_identity_standin.py")
BUCKET = "hpray-pod-identity"
LIFETIME_S = 6.0  # the AWS SDK for C++ refreshes 5 s before Expiration, so ~1 s of use each
PART = 5 << 20  # S3's minimum multipart part: every part is a separately signed request


@pytest.fixture
def pod_identity(tmp_path, monkeypatch):
    """Start the stand-in; point this process at it exactly as the Pod Identity webhook would."""
    s3_port, agent_port = free_ports(2)
    token = tmp_path / "eks-pod-identity-token"
    token.write_text("projected-service-account-token")  # a projected token has no newline
    log = tmp_path / "standin.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(STANDIN), str(s3_port), str(agent_port), str(token), str(LIFETIME_S), BUCKET],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while "ready" not in log.read_text():
            assert proc.poll() is None, f"stand-in exited: {log.read_text()}"
            assert time.monotonic() < deadline, f"stand-in not ready in 30 s: {log.read_text()}"
            time.sleep(0.1)
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"http://127.0.0.1:{agent_port}/v1/credentials")
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(token))
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{s3_port}")
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
        yield log
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _events(log: Path, kind: str) -> list[str]:
    return [line.split()[1] for line in log.read_text().splitlines() if line.startswith(f"{kind} ")]


def test_checkpoints_outlive_credential_rotations(pod_identity, tmp_path):
    import boto3
    import botocore.session
    import pyarrow.fs as pafs
    import torch

    from workloads.common import checkpoint, storage

    log = pod_identity
    endpoint, scheme = os.environ["AWS_ENDPOINT_URL_S3"].split("://")[1], "http"
    # The removed workaround: credentials resolved once and handed to pyarrow.
    frozen = botocore.session.get_session().get_credentials().get_frozen_credentials()
    fixed = pafs.S3FileSystem(
        access_key=frozen.access_key,
        secret_key=frozen.secret_key,
        session_token=frozen.token,
        endpoint_override=endpoint,
        scheme=scheme,
        region="us-east-1",
    )
    with fixed.open_output_stream(f"{BUCKET}/fixed-before") as out:
        out.write(b"accepted while valid")

    fs = storage.s3_filesystem()
    started = time.monotonic()
    big = fs.open_output_stream(f"{BUCKET}/runs/long-write.bin")  # one object, written over rotations
    for step in range(1, 5):
        big.write(bytes([step]) * PART)
        local = tmp_path / f"ckpt{step}"
        checkpoint.save(str(local), {"model": {"w": torch.full((256,), float(step))}}, {"step": step})
        pafs.copy_files(
            str(local),
            f"{BUCKET}/runs/demo/{checkpoint.dir_name(step)}",
            source_filesystem=pafs.LocalFileSystem(),
            destination_filesystem=fs,
        )
        time.sleep(max(0.0, step * 3.5 - (time.monotonic() - started)))
    big.close()
    span = time.monotonic() - started
    issued, revoked = _events(log, "issued"), _events(log, "revoked")

    assert span > 2 * LIFETIME_S, f"the writes took {span:.1f} s; they must outlive several credentials"
    assert frozen.access_key in revoked, "the first credentials did not expire during the test"
    assert len(issued) >= 4 and len(revoked) >= 2, (issued, revoked)
    with (
        pytest.raises(OSError, match="INVALID_ACCESS_KEY_ID"),
        fixed.open_output_stream(f"{BUCKET}/fixed-after") as out,
    ):
        out.write(b"rejected once expired")

    loaded = checkpoint.load_latest_valid(f"s3://{BUCKET}/runs", "demo")
    assert loaded is not None and loaded.step == 4
    assert torch.equal(loaded.state["model"]["w"], torch.full((256,), 4.0))
    assert [step for step, _ in checkpoint.list_checkpoints(f"s3://{BUCKET}/runs", "demo")] == [4, 3, 2, 1]

    # boto3 (botocore) reads what pyarrow wrote, from the same environment, after the rotations: a
    # new session, as a pod's process starts with (boto3's default session of this test process
    # may hold credentials an earlier test resolved).
    s3 = boto3.session.Session().client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"], region_name="us-east-1")
    body = s3.get_object(Bucket=BUCKET, Key="runs/long-write.bin")["Body"].read()
    assert len(body) == 4 * PART and body[-1] == 4
