"""``upgrade plan --env NAME [--to VERSION] [--apply]``: the ordered steps of a one-minor Kubernetes
upgrade of an environment, each with its commands or config edit and what it disrupts.

Order: read-only checks; pause running jobs (checkpoints stay); control plane and add-ons (one
``cdk deploy`` of the cluster stack: CloudFormation updates the cluster before the add-ons, which
depend on it); system nodes; HyperPod software (UpdateClusterSoftware, rolling); KubeRay CRDs
applied server-side before the operator chart; jobs resumed from their checkpoints.

``--apply`` does only the steps that change nothing a workload sees: the read-only checks (the
control plane, EKS's upgrade insights, and each add-on build pinned for the target against the
builds EKS offers for it: the builds to move to), and the KubeRay CRD apply, server-side, with a
dry run first.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from config import versions
from config.environment import EnvironmentConfig
from config.facts.names import stack_prefix
from ops.errors import OpsError, UsageError
from ops.upgrade import kuberay_crds

FIELD_MANAGER = "hpray"


@dataclass
class Step:
    title: str
    disrupts: str
    commands: list[str] = field(default_factory=list)
    config_edit: str | None = None
    automatic: bool = False  # done by --apply
    number: int = 0


def _minor(v: str) -> tuple[int, int]:
    major, minor = v.split(".")
    return int(major), int(minor)


def target_version(config: EnvironmentConfig, to: str | None) -> str:
    """The version to plan: ``--to``, else the next minor. The messages name ``--to`` only when the
    user gave one; without it they speak of the next minor version."""
    current = config.eks.kubernetes_version
    target = to or versions.next_minor(current)
    error = UsageError if to else OpsError  # a --to that cannot be is a bad command line (exit 2)
    what = f"--to {target}" if to else f"the next minor version, {target},"
    if target == current:
        raise error(f"{what}: {config.name} is already on Kubernetes {current}", "nothing to upgrade")
    if _minor(target) < _minor(current):
        raise error(
            f"--to {target} is older than {config.name}'s Kubernetes {current}; EKS cannot downgrade",
            f"plan the next one: hpray upgrade plan --env {config.name} --to {versions.next_minor(current)}",
        )
    if _minor(target) != _minor(versions.next_minor(current)):
        raise error(
            f"--to {target}: EKS upgrades one minor version at a time ({current} -> {versions.next_minor(current)})",
            f"plan {versions.next_minor(current)} first: hpray upgrade plan --env {config.name} --to {versions.next_minor(current)}",
        )
    supported = versions.supported_kubernetes_versions()
    if target not in supported:
        hyperpod = target in versions.HYPERPOD_KUBERNETES_VERSIONS
        raise error(
            (
                f"--to {target}: "
                if to
                else f"no upgrade from Kubernetes {current} to plan: the next minor version, {target}: "
            )
            + (
                "this app pins no add-ons or kubectl layer for it"
                if hyperpod
                else "SageMaker HyperPod does not support it"
            )
            + f"; allowed: {', '.join(supported)}",
            "add its add-on versions and kubectl layer to config/versions.py first"
            if hyperpod
            else f"wait until HyperPod supports Kubernetes {target} (HyperPod supports {', '.join(versions.HYPERPOD_KUBERNETES_VERSIONS)})",
        )
    return target


def _batch(count: int) -> dict[str, Any]:
    # Small groups one instance at a time (the rest keeps training capacity); larger ones a quarter.
    return {"Type": "INSTANCE_COUNT", "Value": 1} if count <= 4 else {"Type": "CAPACITY_PERCENTAGE", "Value": 25}


def addon_moves(current: str, target: str, offered: dict[str, Any] | None) -> list[str]:
    """Each pinned add-on's move from ``current`` to ``target`` (config/versions.py); with
    ``offered`` (ops/reports/addons.py :func:`offered_builds` for the target), a pin EKS does not
    offer for the target names the build to move to instead."""
    old, new = versions.ADDON_VERSIONS[current], versions.ADDON_VERSIONS[target]
    moves = []
    for name in sorted(new):
        found = (offered or {}).get(name)
        note = ""
        if offered is not None and (found is None or new[name] not in found.builds):
            note = (
                f" [EKS does not offer {new[name]} for {target}; it offers "
                + (", ".join(found.builds) if found and found.builds else "none")
                + (
                    f": move ADDON_VERSIONS[{target!r}][{name!r}] to {found.default or found.builds[0]}"
                    if found and found.builds
                    else ""
                )
                + "]"
            )
        if old.get(name) != new[name] or note:
            moves.append(f"{name}: {old.get(name, '-')} -> {new[name]}{note}")
    return moves


def plan(
    config: EnvironmentConfig, to: str | None = None, *, on: Any = None, offered: dict[str, Any] | None = None
) -> tuple[str, list[Step]]:
    """The steps from the environment's version to ``to`` (default: the next minor); support
    status as of ``on`` (default: today). ``offered``: the add-on builds EKS offers for the target
    (None: not asked), which name the builds to move to where a pin is not offered."""
    target = target_version(config, to)
    current = config.eks.kubernetes_version
    env, region = config.name, config.region
    eks_name, hp_name = config.eks_cluster_name, config.hyperpod_cluster_name
    cluster_stack = f"{stack_prefix(config.name_prefix)}Cluster"
    addon_changes = addon_moves(current, target, offered)
    crd_files = " ".join(f"-f {path}" for path in kuberay_crds.manual_paths())
    status = {v: versions.eks_support_status(v, on or _today()) or "unknown" for v in (current, target)}
    steps = [
        Step(
            "Read-only checks",
            "nothing",
            [
                f"hpray preflight --env {env}",
                f"# --apply: each add-on build pinned for {target} (config/versions.py) against the builds EKS offers for {target}",
                f"aws eks describe-addon-versions --kubernetes-version {target} --region {region} "
                "--query 'addons[].[addonName, addonVersions[].addonVersion]'",
                f"aws eks describe-cluster-versions --cluster-versions {target} --region {region}",
                f"aws eks list-insights --cluster-name {eks_name} --region {region} --filter kubernetesVersions={target}",
                f"hpray status --env {env}",
            ],
            automatic=True,
        ),
        Step(
            "Pause running jobs (their checkpoints stay on FSx / in S3)",
            "running RayJobs stop until step 7; RayServices keep serving",
            [f"hpray jobs --env {env}", f"hpray stop NAME --env {env}    # each running job"],
        ),
        Step(
            f"Control plane {current} -> {target} and EKS add-ons (one deploy of the cluster stack)",
            "the Kubernetes API may answer slowly or briefly fail during the control plane update (kubectl/hpray retry); "
            "pods keep running. The add-ons roll node by node: kube-proxy and the VPC CNI restart per node (no pod restarts), "
            "CoreDNS rolls its replicas",
            [f"npx cdk diff {cluster_stack} -c env={env}", f"npx cdk deploy {cluster_stack} -c env={env}"],
            config_edit=f'config/{env}.yaml: eks.kubernetes_version: "{target}"  (add-ons: '
            + ("; ".join(addon_changes) or "unchanged")
            + f"; kubectl layer {versions.KUBECTL_LAYERS[target][0].rsplit('_', 1)[-1]})",
        ),
        Step(
            f"System nodes (managed node group '{config.eks.system_nodes.instance_type}' x {config.eks.system_nodes.desired_size}) to {target}",
            "nodes are replaced one at a time: the KubeRay operator and every Ray head pod restart on a new node "
            "(a RayService's head restarts; its replicas on HyperPod keep serving)",
            [
                f"aws eks update-nodegroup-version --cluster-name {eks_name} --nodegroup-name system --kubernetes-version {target} --region {region}",
                f"aws eks wait nodegroup-active --cluster-name {eks_name} --nodegroup-name system --region {region}",
            ],
        ),
        Step(
            "HyperPod software (AMI with the new kubelet), rolling",
            "HyperPod replaces each batch of instances: the Ray worker pods on them restart (jobs are paused; a RayService "
            "keeps the replicas on the other instances)",
            [
                f"aws sagemaker update-cluster-software --cluster-name {hp_name} --region {region} --deployment-config "
                + "'"
                + json.dumps(
                    {
                        "RollingUpdatePolicy": {
                            "MaximumBatchSize": _batch(max(g.instance_count for g in config.hyperpod.instance_groups))
                        },
                        "WaitIntervalInSeconds": 300,
                    },
                    separators=(",", ":"),
                )
                + "'",
                f"aws sagemaker describe-cluster --cluster-name {hp_name} --region {region} --query ClusterStatus",
                "# Between upgrades HyperPod can patch on its own: an instance group's ScheduledUpdateConfig "
                "(a cron schedule with the same rolling DeploymentConfig); not set by this platform yet",
            ],
        ),
        Step(
            f"KubeRay CRDs (KubeRay {versions.KUBERAY_OPERATOR.version}) server-side, then the operator chart",
            "nothing for running Ray clusters: the CRDs are applied before the operator that reads them (Helm never "
            "upgrades CRDs itself)",
            [
                f"{kuberay_crds.pull_command()}    # the pinned chart; its crds/ hold the CRDs",
                f"kubectl apply --server-side --force-conflicts --field-manager={FIELD_MANAGER} --dry-run=server {crd_files}",
                f"kubectl apply --server-side --force-conflicts --field-manager={FIELD_MANAGER} {crd_files}",
                f"npx cdk deploy {cluster_stack} -c env={env}    # the operator chart, when its version changed",
            ],
            automatic=True,
        ),
        Step(
            "Resume the paused jobs from their checkpoints; check the platform",
            "nothing (jobs start again from their newest checkpoint)",
            [f"hpray resume NAME --env {env}    # each job stopped in step 2", f"hpray status --env {env}"],
        ),
    ]
    for i, step in enumerate(steps, 1):
        step.number = i
    header = (
        f"Upgrade plan for {env}: Kubernetes {current} ({status[current]} support) -> {target} ({status[target]} support), "
        f"EKS {eks_name}, HyperPod {hp_name}, {region}"
    )
    return header, steps


def _today() -> date:
    return date.today()


def render(header: str, steps: list[Step]) -> str:
    lines = [header, ""]
    for s in steps:
        lines.append(f"{s.number}. {s.title}" + ("   [--apply does this]" if s.automatic else ""))
        lines.append(f"   disrupts: {s.disrupts}")
        if s.config_edit:
            lines.append(f"   config:   {s.config_edit}")
        for c in s.commands:
            lines.append(f"   $ {c}" if not c.startswith("#") else f"   {c}")
        lines.append("")
    return "\n".join(lines).rstrip()


def as_dict(header: str, steps: list[Step]) -> dict[str, Any]:
    return {"summary": header, "steps": [asdict(s) for s in steps]}


# ---------------------------------------------------------------------------------------------
# --apply: the safe steps
# ---------------------------------------------------------------------------------------------


def crd_documents(crd_dir: Path | None = None) -> list[dict[str, Any]]:
    """The CRDs of the pinned KubeRay release (default: from its chart, verified and cached: ops/upgrade/kuberay_crds.py)."""
    crd_dir = crd_dir or kuberay_crds.crd_dir()
    docs = []
    for path in sorted(crd_dir.glob("*.yaml")):
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        docs += [
            d
            for d in yaml.load_all(path.read_text(), Loader=loader)
            if d and d.get("kind") == "CustomResourceDefinition"
        ]
    return docs


def apply_safe_steps(
    config: EnvironmentConfig, aws: Any, kube: Any, target: str, *, emit: Any, crd_dir: Path | None = None
) -> dict[str, Any]:
    """Read-only checks, then the KubeRay CRDs server-side: a dry run of every CRD first, and the
    real apply only when every dry run passed."""
    result: dict[str, Any] = {}
    cluster = aws.call("eks", "describe_cluster", name=config.eks_cluster_name)["cluster"]
    result["control_plane"] = {"version": cluster.get("version"), "status": cluster.get("status")}
    emit(f"control plane: Kubernetes {cluster.get('version')}, {cluster.get('status')}")
    if cluster.get("status") != "ACTIVE":
        raise OpsError(
            f"EKS cluster {config.eks_cluster_name} is {cluster.get('status')}, not ACTIVE",
            "wait for the running update to finish",
        )
    insights = aws.paginate(
        "eks", "list_insights", "insights", clusterName=config.eks_cluster_name, filter={"kubernetesVersions": [target]}
    )
    blocking = [i for i in insights if (i.get("insightStatus") or {}).get("status") == "ERROR"]
    result["insights"] = [
        {"name": i.get("name"), "status": (i.get("insightStatus") or {}).get("status")} for i in insights
    ]
    emit(
        f"upgrade insights for {target}: {len(insights)}, blocking: {len(blocking)}"
        + "".join(f"\n  ERROR {i.get('name')}: {(i.get('insightStatus') or {}).get('reason', '')}" for i in blocking)
    )
    # The add-on builds config/versions.py pins for the target, against what EKS offers for it:
    # the builds to move to when a pin is not offered.
    from ops.reports.addons import evaluate_addon_builds, offered_builds
    from ops.reports.checks import FAIL

    addon_rows = evaluate_addon_builds(
        target, config.region, versions.ADDON_VERSIONS[target], offered_builds(aws, target)
    )
    missing = [row for row in addon_rows if row.status == FAIL]
    result["addons"] = [row.as_dict() for row in addon_rows]
    emit(
        f"add-on builds pinned for {target}: {len(versions.ADDON_VERSIONS[target]) - len(missing)} offered by EKS, "
        f"{len(missing)} not" + "".join(f"\n  FAIL {row.check}: {row.detail}\n    fix: {row.fix}" for row in missing)
    )
    running = [
        j["metadata"]["name"]
        for j in kube.list_ray("RayJob")
        if ((j.get("status") or {}).get("jobDeploymentStatus") or "New")
        in ("New", "Initializing", "Running", "Waiting", "Retrying")
    ]
    result["running_jobs"] = running
    emit(f"running jobs to pause before step 3: {', '.join(running) or 'none'}")
    if blocking:
        raise OpsError(
            f"{len(blocking)} EKS upgrade insight(s) for {target} are ERROR",
            "fix them before the upgrade (aws eks describe-insight)",
        )
    if missing:
        raise OpsError(
            f"EKS does not offer the build config/versions.py pins for Kubernetes {target} of "
            + ", ".join(row.check.removeprefix("add-on ") for row in missing),
            "; ".join(row.fix or "" for row in missing),
        )
    docs = crd_documents(crd_dir)
    for dry_run in (True, False):
        for doc in docs:
            kube.apply_crd(doc, field_manager=FIELD_MANAGER, dry_run=dry_run)
        emit(
            f"KubeRay CRDs {'dry run (server-side) passed' if dry_run else 'applied server-side'}: "
            + ", ".join(d["metadata"]["name"] for d in docs)
        )
    result["crds_applied"] = [d["metadata"]["name"] for d in docs]
    return result
