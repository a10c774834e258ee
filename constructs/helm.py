"""The one small base every Helm chart of the platform goes through.

A :class:`ChartRelease` is plain data (chart, repository, pinned version, release name,
namespace, values): the values come from pure functions of config, so tests read them without
synthesizing. :class:`HelmRelease` installs one on the cluster with the namespace created and
explicit dependencies.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_cdk import Duration
from constructs import Construct, IConstruct

from config.versions import ChartPin, semver
from constructs.eks_cluster import PlatformEksCluster

# Helm stores a release in a Secret named sh.helm.release.v1.<name>.v<revision>; release names are
# limited to 53 characters so that it fits a 63-character DNS label (Helm's own check).
HELM_RELEASE_NAME_MAX = 53
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def release_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid Helm release name, or None."""
    if len(name) > HELM_RELEASE_NAME_MAX:
        return f"{len(name)} characters; Helm allows at most {HELM_RELEASE_NAME_MAX}"
    if not _DNS_LABEL_RE.match(name):
        return "allowed: lowercase letters, digits and '-', starting and ending with a letter or digit"
    return None


@dataclass(frozen=True)
class ChartRelease:
    """One pinned chart, installed as one release into one namespace."""

    release: str
    pin: ChartPin
    namespace: str
    values: Mapping[str, Any] = field(default_factory=dict)
    # Every chart waits for its workloads to be ready, so that what depends on it (HyperPod
    # cluster creation) starts only after the chart is really running.
    wait: bool = True
    timeout_minutes: int = 15

    def __post_init__(self) -> None:
        problem = release_name_problem(self.release)
        if problem:
            raise ValueError(f"Helm release name {self.release!r} is not valid: {problem}")
        if len(self.namespace) > 63 or not _DNS_LABEL_RE.match(self.namespace):
            raise ValueError(
                f"namespace {self.namespace!r} is not a Kubernetes namespace name; allowed: 1-63 "
                "lowercase letters, digits and '-', starting and ending with a letter or digit"
            )
        if semver(self.pin.version) is None:
            raise ValueError(f"chart {self.pin.chart} version {self.pin.version!r} is not pinned to a release version")
        if not 1 <= self.timeout_minutes <= 15:
            # The kubectl provider's Lambda handler stops after 15 minutes.
            raise ValueError(f"Helm timeout {self.timeout_minutes} min is outside 1-15 min")


class HelmRelease(Construct):
    """Installs a :class:`ChartRelease` on ``cluster``: after its nodes and add-ons, then after
    ``after``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: PlatformEksCluster,
        release: ChartRelease,
        after: Sequence[IConstruct] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self.release = release
        self.chart = cluster.helm_chart(
            self,
            "Chart",
            chart=release.pin.chart,
            repository=release.pin.repository,
            version=release.pin.version,
            release=release.release,
            namespace=release.namespace,
            create_namespace=True,
            # CRDs ship in the charts' crds/ folders (KubeRay): Helm installs them first.
            skip_crds=False,
            values=dict(release.values),
            wait=release.wait,
            timeout=Duration.minutes(release.timeout_minutes),
            # Roll back a failed install or upgrade instead of leaving a half-installed release.
            atomic=True,
        )
        cluster.install(self.chart, after=after)
