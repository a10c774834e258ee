"""What the platform's Helm releases really run: each release rendered with the real ``helm
template`` of the pinned chart (artifacts/pinned.py) and reduced to the pods it schedules.

:func:`chart_pods` is the input the placement check takes for Helm-installed pods, and
:func:`unknown_values_keys` is the check that every values key this app sets exists in its chart
(Helm ignores a misspelled key silently).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from artifacts import pinned
from config.environment import EnvironmentConfig
from constructs.helm import ChartRelease
from constructs.hyperpod_dependencies import device_plugin_releases
from constructs.kuberay import kuberay_operator_release, operator_image_repository
from sizing.scheduling import Pod, pod_from_spec

WorkloadKind = Literal["Deployment", "DaemonSet", "StatefulSet"]
_WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet")


class ChartRenderError(RuntimeError):
    """``helm template`` refused a release: the message names the release and helm's error."""


@dataclass(frozen=True)
class ChartPod:
    """One pod template a Helm release schedules.

    ``pod_spec`` is the rendered ``spec.template.spec`` exactly as Kubernetes would get it
    (containers with requests/limits, nodeSelector, affinity, tolerations, ...), in the camelCase
    of the Kubernetes API. ``replicas`` is the Deployment's or StatefulSet's count (Kubernetes'
    default 1 when the chart leaves it out) and None for a DaemonSet, which runs one pod on every
    node its nodeSelector, affinity and tolerations admit.
    """

    release: str
    chart: str
    kind: WorkloadKind
    name: str
    namespace: str
    replicas: int | None
    pod_labels: Mapping[str, str]
    pod_spec: Mapping[str, Any]

    @property
    def is_daemonset(self) -> bool:
        return self.kind == "DaemonSet"


def scheduling_pods(pods: list[ChartPod]) -> list[Pod]:
    """The pods of rendered Helm releases for the placement check
    (``sizing.placement.check_against(env, extra_pods=...)``): a DaemonSet one per node it
    selects, a Deployment its replicas."""
    return [
        pod_from_spec(p.name, p.pod_spec, replicas=1 if p.replicas is None else p.replicas, daemonset=p.is_daemonset)
        for p in pods
    ]


def chart_releases(config: EnvironmentConfig) -> list[ChartRelease]:
    """Every Helm release the app installs for ``config``, as the cluster stack installs them."""
    teams = tuple(t.resolved_namespace for t in config.teams)
    return [
        kuberay_operator_release(config.eks, team_namespaces=teams, image_repository=operator_image_repository(config)),
        *device_plugin_releases(config),
    ]


def _check_chart_version(release: ChartRelease, chart_dir: Path) -> None:
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    if str(chart["version"]) != release.pin.version:
        raise ChartRenderError(
            f"release {release.release}: chart {release.pin.chart} version {release.pin.version} is configured, "
            f"but the chart rendered here is version {chart['version']} (config/versions.py CHART_SOURCES)"
        )


def render_release(release: ChartRelease, *, kubernetes_version: str) -> list[dict[str, Any]]:
    """The objects ``helm template`` renders for ``release`` (CRDs not included), in helm's order."""
    chart_dir = pinned.chart_dir(release.pin.chart)
    _check_chart_version(release, chart_dir)
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="values-") as values:
        json.dump(dict(release.values), values)
        values.flush()
        proc = subprocess.run(
            [
                str(pinned.helm_binary(kubernetes_version)),
                "template",
                release.release,
                str(chart_dir),
                "--namespace",
                release.namespace,
                "--values",
                values.name,
                "--kube-version",
                kubernetes_version,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        error = " ".join(proc.stderr.split())
        raise ChartRenderError(
            f"helm template of release {release.release} ({release.pin.chart} {release.pin.version}) failed: {error}"
        )
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def pods_of(release: ChartRelease, objects: list[dict[str, Any]]) -> list[ChartPod]:
    """The pod templates of the workloads among ``objects`` (rendered from ``release``)."""
    pods = []
    for obj in objects:
        if obj.get("kind") not in _WORKLOAD_KINDS:
            continue
        spec = obj["spec"]
        daemonset = obj["kind"] == "DaemonSet"
        pods.append(
            ChartPod(
                release=release.release,
                chart=release.pin.chart,
                kind=obj["kind"],
                name=obj["metadata"]["name"],
                # Helm installs objects without a namespace of their own into the release's.
                namespace=obj["metadata"].get("namespace") or release.namespace,
                replicas=None if daemonset else int(spec.get("replicas", 1)),
                pod_labels=dict(spec["template"].get("metadata", {}).get("labels") or {}),
                pod_spec=spec["template"]["spec"],
            )
        )
    return pods


def chart_pods(config: EnvironmentConfig) -> list[ChartPod]:
    """Every pod template the Helm releases of ``config`` schedule, rendered by the real helm.

    Raises :class:`artifacts.pinned.ArtifactUnavailable` when a chart or helm cannot be had and
    :class:`ChartRenderError` when helm refuses a release.
    """
    version = config.eks.kubernetes_version
    return [
        pod
        for release in chart_releases(config)
        for pod in pods_of(release, render_release(release, kubernetes_version=version))
    ]


# ---------------------------------------------------------------------------------------------
# Values keys against the chart
# ---------------------------------------------------------------------------------------------

# Values that a chart hands to Kubernetes as a whole object: their inside is Kubernetes' schema
# (checked on the rendered pods), not the chart's defaults.
KUBERNETES_OBJECT_VALUES = frozenset(
    {"affinity", "tolerations", "resources", "nodeSelector", "securityContext", "podSecurityContext"}
)


def _referenced_in_templates(chart_dir: Path, path: tuple[str, ...]) -> bool:
    """A key the chart reads but leaves out of values.yaml (commented there as an example)."""
    pattern = re.compile(r"\.Values\." + r"\.".join(map(re.escape, path)) + r"(?![A-Za-z0-9_])")
    return any(pattern.search(p.read_text()) for p in (chart_dir / "templates").rglob("*") if p.is_file())


def unknown_values_keys(values: Mapping[str, Any], chart_dir: Path) -> list[str]:
    """Dotted paths in ``values`` that the chart at ``chart_dir`` neither defaults nor reads.

    A key is known when the chart's values.yaml has it, or its templates read ``.Values.<path>``.
    Below a key whose default is not a non-empty map (free-form maps, lists, scalars), or that is a
    Kubernetes object (:data:`KUBERNETES_OBJECT_VALUES`), the chart does not constrain the keys.
    A values.schema.json, where the chart ships one, is applied too.
    """
    defaults = yaml.safe_load((chart_dir / "values.yaml").read_text()) or {}
    unknown: list[str] = []

    def walk(ours: Mapping[str, Any], theirs: Any, path: tuple[str, ...]) -> None:
        for key, value in ours.items():
            here = (*path, key)
            if isinstance(theirs, Mapping) and key in theirs:
                default = theirs[key]
                if (
                    key not in KUBERNETES_OBJECT_VALUES
                    and isinstance(value, Mapping)
                    and isinstance(default, Mapping)
                    and default
                ):
                    walk(value, default, here)
            elif not _referenced_in_templates(chart_dir, here):
                unknown.append(".".join(here))

    walk(values, defaults, ())
    schema_path = chart_dir / "values.schema.json"
    if schema_path.exists():
        import jsonschema

        merged = _deep_merge(defaults, values)
        for error in jsonschema.Draft7Validator(json.loads(schema_path.read_text())).iter_errors(merged):
            unknown.append(f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}")
    return sorted(unknown)


def _deep_merge(base: Any, over: Any) -> Any:
    """Helm's merge of user values over chart defaults: maps merge, everything else replaces."""
    if isinstance(base, Mapping) and isinstance(over, Mapping):
        return {**base, **{k: _deep_merge(base.get(k), v) for k, v in over.items()}}
    return over
