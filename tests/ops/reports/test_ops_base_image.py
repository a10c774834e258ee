"""ops/reports/base_image.py: `images pin-base` reads the base tag's digest from a registry speaking the
Docker Registry HTTP API v2 (here a fake on 127.0.0.1) and fills workloads/Dockerfile's digest slot;
preflight and status fail while the slot is empty. Tests work on copies of the Dockerfile."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ops.cli import main
from ops.reports import base_image
from ops.reports.base_image import base_check, read_base
from ops.reports.checks import FAIL, PASS, Check
from ops.reports.preflight import exit_status, run_preflight
from tests.ops.conftest import TEST_BASE_DIGEST

LOOPBACK_ALLOWED = True  # the fake registry

ROOT = Path(__file__).resolve().parents[3]
REAL = ROOT / "workloads" / "Dockerfile"
BASE = read_base(REAL)[0]
DIGEST = "sha256:" + "5f" * 32
TOKEN = "fake-pull-token-1"
FIX = "hpray images pin-base (on a machine that reaches Docker Hub), then commit workloads/Dockerfile and deploy"


@pytest.fixture
def empty(tmp_path):
    """A copy of the real Dockerfile with the slot empty (whatever the real one holds)."""
    path = tmp_path / "Dockerfile"
    lines = [
        'ARG RAY_BASE_DIGEST=""' if line.startswith("ARG RAY_BASE_DIGEST=") else line
        for line in REAL.read_text().splitlines(keepends=True)
    ]
    path.write_text("".join(line if line.endswith("\n") else line + "\n" for line in lines))
    return path


# ---------------------------------------------------------------------------------------------
# The checks (offline)
# ---------------------------------------------------------------------------------------------


def test_empty_slot_fails_with_the_pin_command(empty):
    assert base_check(empty) == Check(
        "base image digest",
        FAIL,
        f"the workloads image would be built from {BASE} by tag alone: RAY_BASE_DIGEST in workloads/Dockerfile is empty",
        FIX,
    )
    assert base_check(empty, deployed=True).detail == (
        f"the workloads image is built from {BASE} by tag alone: RAY_BASE_DIGEST in workloads/Dockerfile is empty"
    )


def test_filled_slot_passes(empty):
    base_image.write_digest(empty, DIGEST)
    assert base_check(empty) == Check("base image digest", PASS, f"{BASE}@{DIGEST}")


def test_malformed_slot_fails(empty):
    empty.write_text(empty.read_text().replace('ARG RAY_BASE_DIGEST=""', 'ARG RAY_BASE_DIGEST="sha256:abc"'))
    assert base_check(empty) == Check(
        "base image digest",
        FAIL,
        "RAY_BASE_DIGEST in workloads/Dockerfile is 'sha256:abc', not '@sha256:<64 hex digits>'",
        FIX,
    )


def test_preflight_fails_while_the_slot_is_empty_and_passes_once_filled(empty, monkeypatch):
    # Only the base check: the AWS checks are tested in test_ops_preflight.py.
    import ops.reports.preflight as preflight

    monkeypatch.setattr(preflight, "evaluate_identity", lambda *_: Check("credentials", PASS, "ok"))
    monkeypatch.setattr(preflight, "_guarded", lambda label, fn: [])
    monkeypatch.setattr(preflight, "image_checks", lambda *a, **k: [])
    aws = type("A", (), {"call": lambda self, *a, **k: {}})()
    from config import parse_environment
    from tests.ops.fakes import healthy_data

    config = parse_environment(healthy_data())
    checks = run_preflight(config, aws, dockerfile=empty)
    assert checks[-1] == base_check(empty) and checks[-1].status == FAIL and exit_status(checks) == 1
    base_image.write_digest(empty, DIGEST)
    checks = run_preflight(config, aws, dockerfile=empty)
    assert checks[-1].status == PASS and exit_status(checks) == 0


def test_status_reports_the_unpinned_base_as_a_problem(empty):
    from ops.reports.status import problems_of

    report = {"images": [base_check(empty, deployed=True).as_dict()]}
    assert problems_of(report) == [
        f"base image digest: the workloads image is built from {BASE} by tag alone: RAY_BASE_DIGEST in "
        f"workloads/Dockerfile is empty; fix: {FIX}"
    ]


def test_the_tests_default_dockerfile_is_a_pinned_copy(pinned_dockerfile):
    assert base_image.DOCKERFILE == pinned_dockerfile != REAL
    assert base_check() == Check("base image digest", PASS, f"{BASE}@{TEST_BASE_DIGEST}")


# ---------------------------------------------------------------------------------------------
# pin-base against a fake registry
# ---------------------------------------------------------------------------------------------


class Registry:
    """Token endpoint and manifest HEAD of the Registry API v2, on 127.0.0.1."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.token_status = 200
        self.manifest_status = 200
        self.digest: str | None = DIGEST
        self.issued = TOKEN
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _record(self):
                registry.requests.append((self.command, self.path, dict(self.headers)))

            def do_GET(self):
                self._record()
                body = json.dumps({"token": registry.issued, "expires_in": 300}).encode()
                self.send_response(registry.token_status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_HEAD(self):
                self._record()
                ok = self.headers.get("Authorization") == f"Bearer {TOKEN}"
                status = registry.manifest_status if ok else 401
                self.send_response(status)
                if status == 200 and registry.digest is not None:
                    self.send_header("Docker-Content-Digest", registry.digest)
                    self.send_header("Content-Type", "application/vnd.oci.image.index.v1+json")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> Registry:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def registry():
    with Registry() as r:
        yield r


def no_aws(*args):
    raise AssertionError("images pin-base makes no AWS call")


def no_config(name):
    raise AssertionError("images pin-base reads no environment")


def pin(path, auth_url, registry_url):
    out, err = io.StringIO(), io.StringIO()
    argv = ["images", "pin-base", "--dockerfile", str(path), "--auth-url", auth_url, "--registry-url", registry_url]
    code = main(argv, out=out, err=err, prog="hpray", aws_factory=no_aws, load_config=no_config)
    return code, out.getvalue(), err.getvalue()


def test_pin_base_reads_the_digest_with_a_bearer_token_and_fills_the_slot(empty, registry):
    before = empty.read_text()
    code, out, err = pin(empty, f"{registry.url}/token", registry.url)
    assert (code, err) == (0, "")
    assert out == (
        f"{BASE} pinned to {DIGEST} in {empty}\n"
        "next: commit the Dockerfile and deploy (the image is rebuilt from the pinned base)\n"
    )
    # Exactly one line changed: the slot.
    assert empty.read_text() == before.replace('ARG RAY_BASE_DIGEST=""', f'ARG RAY_BASE_DIGEST="@{DIGEST}"')
    assert base_check(empty).status == PASS
    (get, token_path, _), (head, manifest_path, headers) = registry.requests
    repository, tag = BASE.rsplit(":", 1)
    assert get == "GET" and urllib.parse.urlsplit(token_path).path == "/token"
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(token_path).query) == {
        "service": ["registry.docker.io"],
        "scope": [f"repository:{repository}:pull"],
    }
    assert (head, manifest_path) == ("HEAD", f"/v2/{repository}/manifests/{tag}")
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert headers["Accept"].split(", ") == [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
    # Run again: nothing to change.
    code, out, _ = pin(empty, f"{registry.url}/token", registry.url)
    assert (code, out) == (0, f"{BASE} is already pinned to {DIGEST} in {empty}\n")


def test_pinned_dockerfile_passes_hadolint(empty, registry):
    assert pin(empty, f"{registry.url}/token", registry.url)[0] == 0
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run([str(hadolint), "--no-color", str(empty)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_moved_tag_is_re_pinned(empty, registry):
    base_image.write_digest(empty, "sha256:" + "ab" * 32)
    code, out, _ = pin(empty, f"{registry.url}/token", registry.url)
    assert code == 0
    assert out.splitlines()[0] == f"{BASE} re-pinned in {empty}: sha256:{'ab' * 32} -> {DIGEST}"
    assert read_base(empty)[1] == f"@{DIGEST}"


@pytest.mark.parametrize(
    ("setup", "message", "fix"),
    [
        (
            {"manifest_status": 404},
            "manifest of {base}: HTTP 404 Not Found",
            "no such tag on Docker Hub: check ARG RAY_BASE in the Dockerfile",
        ),
        (
            {"token_status": 401},
            "pull token for rayproject/ray: HTTP 401 Unauthorized",
            "Docker Hub refused the anonymous pull token; retry, or check for a proxy rewriting requests",
        ),
        (
            {"digest": "sha256:1234"},
            "manifest of {base}: Docker-Content-Digest is 'sha256:1234', not 'sha256:<64 hex digits>'",
            None,
        ),
        (
            {"digest": None},
            "manifest of {base}: Docker-Content-Digest is None, not 'sha256:<64 hex digits>'",
            None,
        ),
    ],
)
def test_registry_errors_are_one_line_exit_1_and_leave_the_file(empty, registry, setup, message, fix):
    for key, value in setup.items():
        setattr(registry, key, value)
    before = empty.read_text()
    code, out, err = pin(empty, f"{registry.url}/token", registry.url)
    expected = f"error: {message.format(base=BASE)}\n" + (f"fix:   {fix}\n" if fix else "")
    assert (code, out, err) == (1, "", expected)
    assert empty.read_text() == before


def test_the_manifest_request_carries_the_issued_token(empty, registry):
    registry.issued = "another-token"  # the registry accepts only TOKEN
    code, out, err = pin(empty, f"{registry.url}/token", registry.url)
    assert (code, out) == (1, "")
    assert err == (
        f"error: manifest of {BASE}: HTTP 401 Unauthorized\n"
        "fix:   Docker Hub refused the anonymous pull token; retry, or check for a proxy rewriting requests\n"
    )
    assert registry.requests[-1][2]["Authorization"] == "Bearer another-token"


def test_an_unreachable_registry_is_one_line_exit_1(empty):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    code, out, err = pin(empty, f"http://127.0.0.1:{port}/token", f"http://127.0.0.1:{port}")
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: pull token for rayproject/ray: ") and "Traceback" not in err
    assert lines[1] == (
        "fix:   run this on a machine that reaches Docker Hub (HTTPS to auth.docker.io and registry-1.docker.io)"
    )
    assert base_check(empty).status == FAIL
