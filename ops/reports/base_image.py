"""The workloads image's base, pinned by digest: ``images pin-base`` fills the digest slot of
workloads/Dockerfile, and ``preflight`` and ``status`` fail while it is empty.

The Dockerfile names its base as a tag (``ARG RAY_BASE``) and a digest slot (``ARG
RAY_BASE_DIGEST``, ``""`` or ``"@sha256:<64 hex>"``); ``FROM ${RAY_BASE}${RAY_BASE_DIGEST}``. A tag
alone can be moved upstream, so an image built from an empty slot is not reproducible. Reading the
digest needs Docker Hub, which only the operator's machine may reach: ``pin-base`` asks the Docker
Registry HTTP API v2 (an anonymous pull token, then ``HEAD`` of the tag's manifest, whose
``Docker-Content-Digest`` header is the digest a ``docker pull`` of the tag resolves to: the
multi-platform index when there is one) and rewrites the slot. The checks read the file only.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, TextIO

from manifests.image import DOCKERFILE as DOCKERFILE_NAME
from manifests.image import REPO_ROOT, checkout_root
from ops.errors import EXIT_OK, OpsError, UsageError
from ops.reports.checks import FAIL, PASS, Check

# The Dockerfile the CDK asset builds: the checkout's (the one this command runs from, else the one
# the current folder is in); outside a checkout, the installed copy (read, never written).
DOCKERFILE = (checkout_root() or REPO_ROOT) / DOCKERFILE_NAME
INSTALLED_COPY = REPO_ROOT / DOCKERFILE_NAME
DOCKER_HUB_AUTH = "https://auth.docker.io/token"
DOCKER_HUB_SERVICE = "registry.docker.io"
DOCKER_HUB_REGISTRY = "https://registry-1.docker.io"
# Every manifest type a tag may point at: the multi-platform index (OCI, Docker) first, then a
# single-platform manifest; the registry answers with the digest of what the tag names.
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
PIN_COMMAND = "hpray images pin-base"
LABEL = "base image digest"

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_ARG = re.compile(r"^ARG (RAY_BASE|RAY_BASE_DIGEST)=(.*)$", re.MULTILINE)
_SLOT = re.compile(r'^ARG RAY_BASE_DIGEST=".*"$', re.MULTILINE)


class RegistryError(OpsError):
    """Docker Hub could not be reached or did not give a digest (exit 1)."""


def read_base(dockerfile: Path) -> tuple[str, str]:
    """``(RAY_BASE, RAY_BASE_DIGEST)`` as the Dockerfile sets them (quotes removed)."""
    try:
        text = dockerfile.read_text()
    except OSError as e:
        raise OpsError(f"cannot read {dockerfile}: {e.strerror}", "run from the repository checkout") from None
    args = {name: value.strip().strip('"') for name, value in _ARG.findall(text)}
    if "RAY_BASE" not in args or "RAY_BASE_DIGEST" not in args:
        raise OpsError(f"{dockerfile} has no ARG RAY_BASE and ARG RAY_BASE_DIGEST lines", None)
    return args["RAY_BASE"], args["RAY_BASE_DIGEST"]


def base_check(dockerfile: Path | None = None, *, deployed: bool = False) -> Check:
    """PASS when the slot holds a digest; FAIL, with the command that fills it, when it is empty.
    ``deployed``: the wording of ``status`` (the image already built from this file)."""
    path = dockerfile or DOCKERFILE
    try:
        base, digest = read_base(path)
    except OpsError as e:
        return Check(LABEL, FAIL, e.message, e.fix)
    fix = f"{PIN_COMMAND} (on a machine that reaches Docker Hub), then commit {DOCKERFILE_NAME} and deploy"
    if digest == "":
        built = "the workloads image is built" if deployed else "the workloads image would be built"
        return Check(
            LABEL, FAIL, f"{built} from {base} by tag alone: RAY_BASE_DIGEST in {DOCKERFILE_NAME} is empty", fix
        )
    if not (digest.startswith("@") and _DIGEST.fullmatch(digest[1:])):
        return Check(
            LABEL, FAIL, f"RAY_BASE_DIGEST in {DOCKERFILE_NAME} is {digest!r}, not '@sha256:<64 hex digits>'", fix
        )
    return Check(LABEL, PASS, f"{base}{digest}")


def _split(image: str) -> tuple[str, str]:
    """``rayproject/ray:TAG`` -> (``rayproject/ray``, ``TAG``); a one-part name is ``library/``."""
    name, sep, tag = image.rpartition(":")
    if not sep or "/" in tag or not name:
        raise OpsError(f"base image {image!r} has no tag", "set ARG RAY_BASE to REPOSITORY:TAG")
    return (name if "/" in name else f"library/{name}"), tag


def _open(request: urllib.request.Request, what: str, timeout: float) -> Any:
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        raise RegistryError(f"{what}: HTTP {e.code} {e.reason}", _http_fix(e.code)) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise RegistryError(
            f"{what}: {reason}",
            "run this on a machine that reaches Docker Hub (HTTPS to auth.docker.io and registry-1.docker.io)",
        ) from None


def _http_fix(code: int) -> str | None:
    return {
        401: "Docker Hub refused the anonymous pull token; retry, or check for a proxy rewriting requests",
        404: "no such tag on Docker Hub: check ARG RAY_BASE in the Dockerfile",
        429: "Docker Hub's anonymous rate limit: wait and retry",
    }.get(code)


def resolve_digest(
    image: str,
    *,
    auth_url: str = DOCKER_HUB_AUTH,
    registry_url: str = DOCKER_HUB_REGISTRY,
    service: str = DOCKER_HUB_SERVICE,
    timeout: float = 30.0,
) -> str:
    """The ``sha256:...`` digest ``image`` (``REPOSITORY:TAG``) has on the registry now."""
    repository, tag = _split(image)
    query = urllib.parse.urlencode({"service": service, "scope": f"repository:{repository}:pull"})
    with _open(urllib.request.Request(f"{auth_url}?{query}"), f"pull token for {repository}", timeout) as r:
        try:
            body = json.loads(r.read())
        except ValueError:
            body = None
    token = (body.get("token") or body.get("access_token")) if isinstance(body, dict) else None
    if not isinstance(token, str) or not token:
        raise RegistryError(f"pull token for {repository}: {auth_url} answered without a token", None)
    request = urllib.request.Request(
        f"{registry_url}/v2/{repository}/manifests/{urllib.parse.quote(tag, safe='')}",
        method="HEAD",
        headers={"Authorization": f"Bearer {token}", "Accept": ", ".join(MANIFEST_TYPES)},
    )
    with _open(request, f"manifest of {image}", timeout) as r:
        digest = r.headers.get("Docker-Content-Digest")
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise RegistryError(
            f"manifest of {image}: Docker-Content-Digest is {digest!r}, not 'sha256:<64 hex digits>'",
            None,
        )
    return digest


def write_digest(dockerfile: Path, digest: str) -> str:
    """Put ``@digest`` into the slot; returns the slot's previous value."""
    if not _DIGEST.fullmatch(digest):
        raise OpsError(f"digest {digest!r} is not 'sha256:<64 hex digits>'", None)
    _, previous = read_base(dockerfile)
    text = dockerfile.read_text()
    new, count = _SLOT.subn(f'ARG RAY_BASE_DIGEST="@{digest}"', text)
    if count != 1:
        raise OpsError(f'{dockerfile}: expected one ARG RAY_BASE_DIGEST="..." line, found {count}', None)
    dockerfile.write_text(new)
    return previous


def pin_base(dockerfile: Path, out: TextIO, **registry: Any) -> int:
    if dockerfile.resolve() == INSTALLED_COPY and checkout_root() is None:
        raise UsageError(
            f"{dockerfile} is the copy installed with hpray, not a checkout's: pinning it changes no image",
            "run it in the checkout you deploy from (cd into it), or pass --dockerfile PATH",
        )
    base, _ = read_base(dockerfile)
    digest = resolve_digest(base, **registry)
    previous = write_digest(dockerfile, digest)
    if previous == f"@{digest}":
        print(f"{base} is already pinned to {digest} in {dockerfile}", file=out)
    elif previous:
        print(f"{base} re-pinned in {dockerfile}: {previous[1:]} -> {digest}", file=out)
    else:
        print(f"{base} pinned to {digest} in {dockerfile}", file=out)
    if previous != f"@{digest}":
        print("next: commit the Dockerfile and deploy (the image is rebuilt from the pinned base)", file=out)
    return EXIT_OK
