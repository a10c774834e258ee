"""The KubeRay CRDs of the pinned operator release, obtained the way an operator's machine can.

``helm pull`` of the pinned ``kuberay-operator`` chart (config/versions.py ``KUBERAY_OPERATOR``:
its repository and version) and the CRD files under the chart's ``crds/``. The files are checked
against the content digest pinned for that release (``KUBERAY_CRDS``, the same files as the
release's ``ray-operator/config/crd/bases``) and kept in the user cache
(``$HYPERPOD_RAY_CACHE`` or ``$XDG_CACHE_HOME/hyperpod-ray``, default ``~/.cache/hyperpod-ray``):
the chart is fetched once per release and a changed or truncated cache is fetched again.

``helm`` is the one on ``PATH``, else the pinned one inside the kubectl layer package when it is
installed (``make deps``).
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from artifacts.pinned import ArtifactUnavailable, cache_dir, helm_binary, tree_digest
from config import versions
from config.versions import ChartPin, SourcePin
from ops.errors import OpsError

HELM_TIMEOUT_S = 120


def chart_folder(chart: ChartPin | None = None) -> str:
    chart = chart or versions.KUBERAY_OPERATOR
    return f"{chart.chart}-{chart.version}"


def pull_command(chart: ChartPin | None = None) -> str:
    """The ``helm pull`` an operator runs by hand: the pinned chart unpacked into ./<chart>-<version>/."""
    chart = chart or versions.KUBERAY_OPERATOR
    return (
        f"helm pull {chart.chart} --repo {chart.repository} --version {chart.version} "
        f"--untar --untardir {chart_folder(chart)}"
    )


def manual_paths(chart: ChartPin | None = None, pin: SourcePin | None = None) -> list[str]:
    """The CRD files of :func:`pull_command`'s folder, relative to where it ran."""
    chart, pin = chart or versions.KUBERAY_OPERATOR, pin or versions.KUBERAY_CRDS
    return [f"{chart_folder(chart)}/{chart.chart}/crds/{name}" for name in pin.files]


def find_helm() -> str:
    on_path = shutil.which("helm")
    if on_path:
        return on_path
    try:
        return str(helm_binary())
    except ArtifactUnavailable:
        raise OpsError(
            "helm not found: it fetches the KubeRay chart whose crds/ hold the CRDs",
            "install helm 3.8 or newer (https://helm.sh/docs/intro/install/) or run `make deps` in the checkout",
        ) from None


def crd_dir(
    *,
    chart: ChartPin | None = None,
    pin: SourcePin | None = None,
    helm: str | None = None,
) -> Path:
    """The folder of the pinned release's CRD files, verified: from the cache, or pulled once."""
    chart, pin = chart or versions.KUBERAY_OPERATOR, pin or versions.KUBERAY_CRDS
    target = cache_dir() / "kuberay-crds" / chart_folder(chart)
    if target.is_dir() and tree_digest(target, pin.files) == pin.digest:
        return target
    helm = helm or find_helm()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        command = [helm, "pull", chart.chart, "--repo", chart.repository, "--version", chart.version, "-d", tmp]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=HELM_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise OpsError(
                f"helm pull of {chart.chart} {chart.version} from {chart.repository} took over {HELM_TIMEOUT_S} s",
                "check the connection to the chart repository (a proxy: HTTPS_PROXY)",
            ) from None
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise OpsError(
                f"helm pull of {chart.chart} {chart.version} from {chart.repository} failed: {reason}",
                "check the connection to the chart repository (a proxy: HTTPS_PROXY), then run again",
            )
        archives = sorted(Path(tmp).glob("*.tgz"))
        staging = Path(tmp) / "crds"
        staging.mkdir()
        with tarfile.open(archives[0], mode="r:gz") as tar:
            for name in pin.files:
                try:
                    member = tar.extractfile(f"{chart.chart}/crds/{name}")
                except KeyError:
                    member = None
                if member is None:
                    raise OpsError(
                        f"the {chart.chart} {chart.version} chart from {chart.repository} has no crds/{name}",
                        "check config/versions.py KUBERAY_OPERATOR and KUBERAY_CRDS",
                    )
                (staging / name).write_bytes(member.read())
        got = tree_digest(staging, pin.files)
        if got != pin.digest:
            raise OpsError(
                f"the CRDs of the {chart.chart} {chart.version} chart from {chart.repository} have digest {got}; "
                f"config/versions.py pins {pin.digest} for KubeRay {chart.version}",
                "nothing was applied; check the chart repository (a mirror serving another chart?) or the pins",
            )
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target
