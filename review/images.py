"""The images table: every image a pod of the platform runs, where it comes from at deploy time,
and what makes it present before the first pod that needs it is scheduled.

Generated from what is synthesized and rendered, never written by hand:

- the pods: the Helm releases rendered by the real ``helm template`` of the pinned charts
  (constructs/chart_pods.py), the Kubernetes objects the templates apply through the kubectl
  handler (the HyperPod health monitoring agent), the RayJob/RayService manifests
  ``python -m manifests render`` writes (every Ray pod; KubeRay's autoscaler sidecar runs the head's
  image) and the EKS add-ons of the templates;
- what fills ECR: the Docker image assets of the cloud assembly (published by ``cdk deploy``, and
  by the pipeline's asset stage, before their stack deploys) and the pull-through cache rules of
  the templates.

:func:`unfilled` is the check: in a ``network.images_from_ecr`` environment an image that names
this account's ECR without an asset or a rule behind it, or any registry outside ECR, is a pod
that can never start. ``python -m review`` (the last step of ``make synth``) exits non-zero,
naming the pod and the image.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from config import versions
from review.document import Document

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig
    from review.assembly import Stack

TABLE_HEADERS = ["Pod", "Container", "Image", "Source at deploy time", "Present before the first pod because"]
_ECR = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
_WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet", "Job", "Pod")


class ImagesUnavailable(RuntimeError):
    """The pods could not be rendered (a chart or helm is missing): one line, with the fix."""


@dataclass(frozen=True)
class ImageUse:
    pod: str  # "DaemonSet kube-system/nvidia-device-plugin (Helm release nvidia-device-plugin)"
    container: str
    image: str


@dataclass(frozen=True)
class ImageRow:
    use: ImageUse
    source: str
    presence: str
    problem: str | None = None  # set when nothing makes the image present

    def cells(self) -> list[str]:
        presence = f"NOTHING: {self.problem}" if self.problem else self.presence
        return [self.use.pod, self.use.container, f"`{self.use.image}`", self.source, presence]


# --- The pods ---------------------------------------------------------------------------------


def _containers(pod_spec: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    for key in ("initContainers", "containers"):
        for c in pod_spec.get(key) or []:
            yield (f"{c['name']} (init)" if key == "initContainers" else c["name"]), c["image"]


def chart_uses(config: EnvironmentConfig) -> list[ImageUse]:
    """The Helm releases' pods, rendered by the real helm of the pinned charts."""
    from artifacts.pinned import ArtifactUnavailable
    from constructs.chart_pods import ChartRenderError, chart_pods

    try:
        pods = chart_pods(config)
    except (ArtifactUnavailable, ChartRenderError) as err:
        raise ImagesUnavailable(f"the Helm releases' pods cannot be rendered: {err}") from None
    return [
        ImageUse(f"{p.kind} {p.namespace}/{p.name} (Helm release {p.release})", name, image)
        for p in pods
        for name, image in _containers(p.pod_spec)
    ]


def applied_uses(stacks: list[Stack]) -> list[ImageUse]:
    """Pods of the objects the templates apply through the kubectl handler."""
    from review.kubernetes import applied_objects

    uses = []
    for o in applied_objects(stacks):
        kind = o.obj.get("kind")
        if kind not in _WORKLOAD_KINDS:
            continue
        meta = o.obj.get("metadata") or {}
        spec = o.obj.get("spec") or {}
        pod_spec = spec if kind == "Pod" else (spec.get("template") or {}).get("spec") or {}
        for name, image in _containers(pod_spec):
            uses.append(
                ImageUse(f"{kind} {meta.get('namespace', 'default')}/{meta.get('name')} ({o.stack})", name, image)
            )
    return uses


def workload_uses(config: EnvironmentConfig) -> list[ImageUse]:
    """Every pod of the RayJob/RayService manifests ``python -m manifests render`` writes."""
    from manifests import security
    from review.kubernetes import workload_manifests

    uses = []
    for m in workload_manifests(config):
        for pod in security.pods_for_review(m):
            for name, image in _containers(pod["spec"]):
                uses.append(
                    ImageUse(f"{m['kind']} {m['metadata']['name']}: pod {pod['metadata']['name']}", name, image)
                )
    return uses


# --- What fills ECR ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Asset:
    stack: str
    repository: str
    tag: str
    source: str  # the build directory and Dockerfile


@dataclass(frozen=True)
class Rule:
    stack: str
    logical_id: str
    prefix: str
    upstream: str
    credential: str | None


def assets_of(stacks: list[Stack]) -> list[Asset]:
    out = []
    for s in stacks:
        for image in s.docker_images.values():
            src = image.get("source") or {}
            where = f"`{image.get('displayName') or src.get('directory', '?')}` ({src.get('dockerFile', 'Dockerfile')}"
            where += "".join(f", {k}={v}" for k, v in sorted((src.get("dockerBuildArgs") or {}).items())) + ")"
            for dest in (image.get("destinations") or {}).values():
                out.append(Asset(s.display_name, dest["repositoryName"], dest["imageTag"], where))
    return out


def rules_of(stacks: list[Stack]) -> list[Rule]:
    out = []
    for s in stacks:
        for r in s.resources():
            if r.type == "AWS::ECR::PullThroughCacheRule":
                p = r.properties
                cred = p.get("CredentialArn")
                out.append(
                    Rule(
                        s.display_name,
                        r.logical_id,
                        p["EcrRepositoryPrefix"],
                        p.get("UpstreamRegistryUrl", "?"),
                        cred if isinstance(cred, str) or cred is None else str(cred),
                    )
                )
    return out


# --- Where each image comes from ----------------------------------------------------------------


def _split(image: str) -> tuple[str, str, str]:
    """(registry, repository, tag-or-digest) of an image reference; Docker Hub's registry is docker.io."""
    first, _, rest = image.partition("/")
    registry, path = (first, rest) if ("." in first or ":" in first) else ("docker.io", image)
    if "@" in path:
        repository, _, ref = path.partition("@")
    else:
        repository, _, ref = path.partition(":")
    return registry, repository.partition(":")[0], ref or "latest"


def _aws_registries(region: str) -> dict[str, str]:
    return {
        versions.EKS_ADDON_REGISTRY_ACCOUNT: "AWS's EKS add-on registry",
        **dict.fromkeys(versions.HEALTH_MONITORING_AGENT_REGISTRIES.values(), "AWS's HyperPod registry"),
    }


def classify(use: ImageUse, config: EnvironmentConfig, assets: list[Asset], rules: list[Rule]) -> ImageRow:
    registry, repository, tag = _split(use.image)
    ecr = _ECR.match(registry)
    closed = config.network.images_from_ecr
    if ecr is None:
        if closed:
            return ImageRow(
                use,
                f"public registry {registry}",
                "",
                f"{registry} is outside ECR and network.images_from_ecr pulls only from ECR",
            )
        return ImageRow(
            use,
            f"public registry {registry} through the NAT gateway",
            f"{registry} serves it; the node pulls it when the pod is first scheduled, through the NAT gateway "
            "(flows `system-nodes->internet`, `hyperpod-nodes->internet`)",
        )
    account, region = ecr["account"], ecr["region"]
    if region != config.region:
        return ImageRow(use, f"ECR in {region}", "", f"not this environment's region {config.region}")
    if account == config.account:
        for a in assets:
            if a.repository == repository and a.tag == tag:
                return ImageRow(
                    use,
                    f"CDK asset {a.source}",
                    f"`cdk deploy` (the pipeline: its asset stage) builds and publishes it before stack {a.stack} deploys",
                )
        for r in rules:
            if repository.startswith(r.prefix + "/"):
                signed = (
                    f", signing in with secret `{r.credential}` (`hpray preflight` and `hpray status` check it)"
                    if r.credential
                    else ""
                )
                return ImageRow(
                    use,
                    f"pull-through cache rule `{r.prefix}` from {r.upstream}",
                    f"stack {r.stack} creates the rule ({r.logical_id}) before the Helm releases and before any "
                    f"workload can be submitted; the first pull imports the image from {r.upstream}{signed}",
                )
        return ImageRow(
            use,
            f"ECR repository `{repository}` of this account",
            "",
            "no CDK asset and no pull-through cache rule fills it",
        )
    owner = _aws_registries(config.region).get(account)
    if owner is None:
        return ImageRow(use, f"ECR of account {account}", "", "neither this account nor an AWS registry")
    return ImageRow(
        use,
        f"{owner} ({account})",
        f"AWS publishes it in {region}; nodes pull it with their ECR read permission"
        + (" through the VPC's ECR endpoints" if config.network.aws_interface_endpoints else ""),
    )


def addon_rows(stacks: list[Stack], config: EnvironmentConfig) -> list[ImageRow]:
    rows = []
    for s in stacks:
        for r in s.resources():
            if r.type == "AWS::EKS::Addon":
                p = r.properties
                use = ImageUse(f"EKS add-on {p.get('AddonName')} ({s.display_name})", "(the add-on's)", "(EKS chooses)")
                rows.append(
                    ImageRow(
                        use,
                        f"AWS's EKS add-on registry, version {p.get('AddonVersion')}",
                        f"EKS installs the add-on with images AWS publishes in {config.region}",
                    )
                )
    return rows


def image_rows(stacks: list[Stack], config: EnvironmentConfig) -> list[ImageRow]:
    """Every image of every pod of the environment, with its source and presence guarantee."""
    assets, rules = assets_of(stacks), rules_of(stacks)
    uses = [*chart_uses(config), *applied_uses(stacks), *workload_uses(config)]
    seen: set[ImageUse] = set()
    rows = []
    for use in uses:
        if use not in seen:
            seen.add(use)
            rows.append(classify(use, config, assets, rules))
    return [*rows, *addon_rows(stacks, config)]


def unfilled(env: str, rows: list[ImageRow]) -> list[str]:
    """One line per pod whose image nothing makes present (``python -m review`` exits 5 on any)."""
    return [
        f"images: {env}: {r.use.pod} container {r.use.container} names {r.use.image}: {r.problem}"
        for r in rows
        if r.problem
    ]


def images_section(doc: Document, rows: list[ImageRow] | None, *, unavailable: str | None = None) -> None:
    doc.heading("Images")
    if rows is None:
        doc.para(f"Not generated: {unavailable or 'no config under config/ matches these stacks'}.")
        return
    doc.para(
        "Every image a pod of the platform runs, generated from the synthesized templates (the "
        "objects the kubectl handler applies, the add-ons, the pull-through cache rules), the cloud "
        "assembly's Docker image assets, the Helm releases rendered by the real helm, and the "
        "RayJob/RayService manifests: where it comes from at deploy time and what makes it present "
        "before the first pod that needs it is scheduled. A pod whose image nothing makes present "
        "fails `make synth`."
    )
    doc.table(TABLE_HEADERS, [r.cells() for r in rows])
