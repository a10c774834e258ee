"""Fixtures for the operations CLI: fake AWS credentials, moto, realistic configs, no network.

moto runs in-process (``mock_aws``): botocore's HTTP send is intercepted, so no request leaves the
process. As a second guard every socket connect in these tests raises.
"""

from __future__ import annotations

import socket

import pytest

from config import parse_environment
from tests.ops.fakes import ACCOUNT, REGION, healthy_data


class NetworkBlocked(RuntimeError):
    pass


@pytest.fixture(autouse=True, scope="module")
def no_network(request):
    """Every connect raises; a module with ``LOOPBACK_ALLOWED = True`` (its own local API server,
    moto server or Ray cluster) may still connect to loopback."""
    # Module scope (not session): other test folders run real local Ray clusters on loopback.
    real = socket.socket.connect
    loopback = getattr(request.module, "LOOPBACK_ALLOWED", False)

    def guarded(self, address, *args, **kwargs):
        if loopback and isinstance(address, tuple) and address[0] in ("127.0.0.1", "localhost", "::1"):
            return real(self, address, *args, **kwargs)
        raise NetworkBlocked(f"test tried to open a network connection to {address!r}")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", guarded)
        if not loopback:
            mp.setattr(socket.socket, "connect_ex", guarded)
        yield


@pytest.fixture(autouse=True)
def no_default_environment(monkeypatch, tmp_path):
    """No default environment leaks in from the machine ($HPRAY_ENV, ~/.config/hpray/context)."""
    monkeypatch.delenv("HPRAY_ENV", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))


@pytest.fixture(autouse=True)
def aws_env(monkeypatch, tmp_path):
    """Fake credentials and region; no profile files, no instance metadata lookups."""
    for var in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_ENDPOINT_URL",
        "AWS_MAX_ATTEMPTS",
        "AWS_RETRY_MODE",
        "KUBECONFIG",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("MOTO_ACCOUNT_ID", ACCOUNT)


@pytest.fixture
def no_credentials(monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)


@pytest.fixture
def moto():
    """A fresh in-process moto account for one test."""
    from moto import mock_aws

    with mock_aws():
        yield


@pytest.fixture(scope="module")
def shared_moto():
    """One moto account for a whole test module (moto's setup and reset cost about a second per
    test on this machine). Tests using it must not depend on each other's resources: each creates
    what it needs under its own names, or cleans up."""
    from moto import mock_aws

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", REGION)
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("MOTO_ACCOUNT_ID", ACCOUNT)
        with mock_aws():
            yield


@pytest.fixture
def healthy_config():
    return parse_environment(healthy_data(), source="test")


# A digest for the pinned test copy of workloads/Dockerfile (test data, not Ray's real digest).
TEST_BASE_DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.fixture(autouse=True)
def pinned_dockerfile(tmp_path_factory, monkeypatch):
    """preflight and status check the workloads Dockerfile's base digest: every test reads a copy
    with the slot filled (tests of the empty slot pass their own copy); the real file is never written."""
    from ops.reports import base_image

    path = tmp_path_factory.mktemp("dockerfile") / "Dockerfile"
    path.write_text(base_image.DOCKERFILE.read_text())
    base_image.write_digest(path, TEST_BASE_DIGEST)
    monkeypatch.setattr(base_image, "DOCKERFILE", path)
    return path
