"""What runs where, for the architecture diagram (review/diagram.py): the Ray heads and worker
groups of the environment's plan (sizing/plan.py) on their node pools, each security group on
what it guards (the attachments review/flows.py proves flows with), the flow table's network
flows (constructs/flows.py) as edges between the parts, and the data flows of the workloads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from constructs import flows as F

from config.facts import names
from constructs.flow_table import flow_table
from manifests import registry
from review.analysis import show
from review.diagram_graph import EKS_CLUSTER_SG, SG, Graph
from review.network_flows import attachments
from review.proof import Env, FlowResult
from sizing.plan import JobPlan
from sizing.pods import RAY_HEAD, WorkerShape

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig
    from review.assembly import Stack


def add_security_groups(g: Graph, stacks: list[Stack]) -> dict[str, set[str]]:
    """Guard edges from each network attachment to its security groups; the groups of each
    attachment kind (``ray-head-pods`` has no template resource of its own)."""
    env = Env(stacks)
    sg_of = {str(env.attr(*_key(g, n), "GroupId")): n for n in g.of_type(SG)}
    for n in g.of_type("AWS::EKS::Cluster"):
        sg_of[str(env.attr(*_key(g, n), "ClusterSecurityGroupId"))] = EKS_CLUSTER_SG
    by_label = {f"{s.display_name}/{r.logical_id}": n for n, (s, r) in g.res.items()}
    for cluster in g.of_type("AWS::SageMaker::Cluster"):
        s, lid = _key(g, cluster)
        by_label.update({f"{s.display_name}/{lid} group {name}": n for name, n in g.groups.items()})
    part_groups: dict[str, set[str]] = {}
    for on, members in attachments(env).items():
        for m in members:
            sgs = {sg_of[x] for x in m.groups if x in sg_of}
            part_groups.setdefault(on, set()).update(sgs)
            node = by_label.get(m.label)
            if node is not None:
                g.guards.update((node, sg) for sg in sgs)
    if any(sg == EKS_CLUSTER_SG for _, sg in g.guards):
        g.nodes[EKS_CLUSTER_SG] = "Security group\nthe EKS cluster security group (EKS creates it)"
        g.kinds[EKS_CLUSTER_SG] = "sg"
    return part_groups


def _key(g: Graph, nid: str) -> tuple[Stack, str]:
    s, r = g.res[nid]
    return s, r.logical_id


def _pods(shape: WorkerShape) -> str:
    count = (
        str(shape.max_replicas)
        if shape.min_replicas == shape.max_replicas
        else (f"{shape.min_replicas}–{shape.max_replicas}")
    )
    return f"{count} {'pod' if count == '1' else 'pods'} on {shape.instance_type}"


def _shape(shape: WorkerShape, per_pod: str) -> str:
    parts = [f"{shape.gpus} GPU"] if shape.gpus else []
    parts += [f"{shape.efa} EFA"] if shape.efa else []
    parts += [f"{shape.cpus} CPU", f"{shape.memory_gib} GiB"]
    return "each " + ", ".join(parts) + (f", {shape.per_pod} {per_pod}" if shape.per_pod > 1 else "")


def add_ray(g: Graph, config: EnvironmentConfig, part_groups: dict[str, set[str]]) -> dict[str, int]:
    """A node per Ray head (on the `system` node group) and per worker group (on its HyperPod
    instance group), with counts and pod shapes from the plan. Returns each Ray node's workload."""
    plan = registry.plan_of(config)
    system = next(
        (
            n
            for n in g.of_type("AWS::EKS::Nodegroup")
            if show(g.res[n][1].properties.get("NodegroupName")) == names.SYSTEM_NODEGROUP
        ),
        None,
    )

    def head_of(resources: dict[str, str]) -> str:
        return f"1 pod, {resources['cpu']} CPU, {resources['memory'].removesuffix('Gi')} GiB"

    head_shape = head_of(RAY_HEAD)
    workload: dict[str, int] = {}
    for i, spec in enumerate(registry.workloads()):
        w = plan.get(spec.key)
        if w is None:
            continue
        # A RayJob's head is sized for its workers; a RayService's is the default one beside its autoscaler.
        head = head_of(w.head.resources) if isinstance(w, JobPlan) else head_shape + " + autoscaler"
        what, per_pod = spec.description, spec.per_pod
        if system is not None:
            h = f"n_ray_head_{i}"
            g.nodes[h] = f"Ray head: {what}\n{w.name}\n{head}"
            g.kinds[h], workload[h] = "ray-head", i
            g.pools[system].append(h)
            g.guards.update((h, sg) for sg in part_groups.get("ray-head-pods", ()))
        anchor = g.groups.get(w.group.name)
        if anchor is not None and w.worker.max_replicas:  # a head-only RayJob has no worker node
            n = f"n_ray_workers_{i}"
            g.nodes[n] = f"Ray workers: {what}\n{w.name}\n{_pods(w.worker)}\n{_shape(w.worker, per_pod)}"
            g.kinds[n], workload[n] = "ray-worker", i
            g.pools[anchor].append(n)
    return workload


def _ports(f: F.NetworkFlow) -> str:
    if f.protocol == "all":
        return "all traffic"
    lo, hi = f.ports
    return f"{f.protocol} " + ("all ports" if (lo, hi) == F.ALL_PORTS else str(lo) if lo == hi else f"{lo}-{hi}")


def _parts(g: Graph, workload: dict[str, int]) -> dict[str, list[str]]:
    def where(type_: str, prop: str, value: str) -> list[str]:
        return [n for n in g.of_type(type_) if show(g.res[n][1].properties.get(prop)) == value]

    return {
        "system-nodes": where("AWS::EKS::Nodegroup", "NodegroupName", names.SYSTEM_NODEGROUP),
        "coredns": where("AWS::EKS::Addon", "AddonName", "coredns"),
        "kuberay-operator": where("Custom::AWSCDK-EKS-HelmChart", "Chart", "kuberay-operator"),
        "ray-head": sorted(n for n in workload if g.kinds[n] == "ray-head"),
        "ray-workers": sorted(n for n in workload if g.kinds[n] == "ray-worker"),
        "hyperpod-nodes": sorted(g.groups.values()),
        "eks-api": g.of_type("AWS::EKS::Cluster"),
        "fsx": g.of_type("AWS::FSx::FileSystem"),
        "kubectl-handler": [
            n for n in g.of_type("AWS::Lambda::Function") if "KubectlProvider/Handler" in (g.res[n][1].path or "")
        ],
        "gcs-store": g.of_type("AWS::ElastiCache::ReplicationGroup"),
        "amp-scraper": g.of_type("AWS::APS::Scraper"),
    }


def add_flows(g: Graph, config: EnvironmentConfig, workload: dict[str, int], results: list[FlowResult] | None) -> None:
    """Each network flow of the flow table as an edge between the nodes of its two parts (a Ray
    head and workers only within one workload), its ports on the label; an edge is unproven when
    the review could not prove one of its flows against the security groups."""
    parts = _parts(g, workload)
    ok = {r.name: r.ok for r in results or [] if r.kind == "network"}
    for f in flow_table(config).network:
        ray = {f.source, f.destination} <= {"ray-head", "ray-workers"}
        for a in parts.get(f.source, []):
            for b in parts.get(f.destination, []):
                if ray and workload[a] != workload[b]:
                    continue
                ports = g.flows.setdefault((a, b), [])
                if _ports(f) not in ports:
                    ports.append(_ports(f))
                if results is not None and not ok.get(f.name, False):
                    g.unproven.add((a, b))
    # What the workloads read and write.
    secrets = {show(g.res[n][1].properties.get("Name")): n for n in g.of_type("AWS::SecretsManager::Secret")}
    token = secrets.get(names.ray_auth_secret_name(config.name_prefix))
    store = secrets.get(names.gcs_store_secret_name(config.name_prefix))
    for n in parts["ray-head"]:
        if token:
            g.data[(token, n)] = "Ray token (CSI mount,\nevery Ray pod)"
        if store and workload[n] > 0:
            g.data[(store, n)] = "GCS store AUTH token"
    plan = registry.plan_of(config)
    if plan.training is not None:
        path = plan.training.settings.storage_path
        buckets = {show(g.res[n][1].properties.get("BucketName")): n for n in g.of_type("AWS::S3::Bucket")}
        target = (
            next(iter(parts["fsx"]), None)
            if path.startswith("/fsx")
            else buckets.get(path.removeprefix("s3://").split("/")[0])
        )
        for n in parts["ray-workers"]:
            if target and workload[n] == 0:
                g.data[(n, target)] = f"checkpoints\n{path}"
