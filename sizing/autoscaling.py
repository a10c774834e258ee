"""Autoscaling: every bundle a workload asks Ray for fits a node type KubeRay's autoscaler knows.

KubeRay's in-tree autoscaler (v1) knows a worker type only by its spec: it derives each node
type's Ray resources from the RayCluster's group specs (``node_types``, as Ray's
``autoscaler/_private/kuberay/autoscaling_config.py`` ``_derive_autoscaling_config_from_ray_cr``
does: the group's ``resources``, else rayStartParams ``num-cpus``/``num-gpus``/``memory``/
``resources``, else the Ray container's limits and requests), never from what running nodes
advertise. A replica whose bundle no node type can host never gets a pod started for it.

The demands are the bundles Ray is asked for at the workloads' maximum replicas or workers
(each workload's plan declares them: ``demands``): the training job's Ray Train workers (``ScalingConfig``
``resources_per_worker`` in one placement group), the generation service's replicas
(``ray_actor_options``) and the Serve LLM service's engines (a placement group per replica:
one ``{"GPU": 1, "accelerator_type:<GPU>": 0.001}`` bundle per tensor-parallel rank, the first
merged with the replica actor's ``{"CPU": 1}``, as ``ray.serve.llm``'s ``LLMServer`` builds it)
and its OpenAI ingress replica (Serve's default of 1 CPU).

``problems(plan)`` bin-packs them as Ray's ``resource_demand_scheduler`` does (placement groups
flattened by strategy, bundles first-fit, most complex first): a bundle no node type can host,
and bundles that find no room on the most nodes the autoscaler may start, are config errors
naming the workload, the deployment or trainer and the resource. The node types are derived from
the same rayStartParams and container resources the manifests render (``worker_group_spec``);
tests/sizing/test_autoscaling.py proves both the derivation and the bin-packing against Ray's
own code on every rendered RayJob and RayService.
"""

from __future__ import annotations

import decimal
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sizing.demand import Bundle, Demand
from sizing.plan import JobPlan, Plan
from sizing.pods import RAY_HEAD, RAY_HEAD_START_PARAMS, WorkerShape

HEAD_NODE_TYPE = "headgroup"  # KubeRay's name of the head's node type (_HEAD_GROUP_NAME)


@dataclass(frozen=True)
class NodeType:
    """One node type of the autoscaling config: its Ray resources and worker bounds."""

    name: str
    min_workers: int
    max_workers: int
    resources: Mapping[str, int]


# ---------------------------------------------------------------------------------------------
# KubeRay's derivation of node types from a RayCluster spec
# ---------------------------------------------------------------------------------------------

_EXPONENTS = {"n": -3, "u": -2, "m": -1, "K": 1, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


def parse_quantity(quantity: str | int | float) -> decimal.Decimal:
    """A Kubernetes quantity ("500m", "16Gi", "2") as a number (Ray's kuberay/utils.py)."""
    if isinstance(quantity, int | float):
        return decimal.Decimal(quantity)
    text = str(quantity)
    number, base, power = text, 10, 0
    if len(text) >= 2 and text[-1] == "i" and text[-2] in _EXPONENTS:
        number, base, power = text[:-2], 1024, _EXPONENTS[text[-2]]
    elif text and text[-1] in _EXPONENTS:
        number, base, power = text[:-1], 1000, _EXPONENTS[text[-1]]
    try:
        value = decimal.Decimal(number)
    except decimal.InvalidOperation:
        raise ValueError(f"{quantity!r} is not a Kubernetes quantity") from None
    return value * decimal.Decimal(base) ** power


def _round_up(quantity: str | int | float) -> int:
    return int(parse_quantity(quantity).to_integral_value(rounding=decimal.ROUND_UP))


def _custom_resources(group_resources: Mapping[str, Any], params: Mapping[str, str]) -> dict[str, int]:
    if group_resources:
        return {k: _round_up(v) for k, v in group_resources.items() if k not in ("CPU", "GPU", "TPU", "memory")}
    if "resources" not in params:
        return {}
    # '"{\"Custom\": 1}"': one pair of quotes around escaped JSON.
    return dict(json.loads(params["resources"][1:-1].replace("\\", "")))


def ray_resources(group_spec: Mapping[str, Any], *, is_head: bool = False) -> dict[str, int]:
    """The Ray resources KubeRay's autoscaler gives a group (``_get_ray_resources_from_group_spec``)."""
    group_resources = group_spec.get("resources") or {}
    params = group_spec.get("rayStartParams") or {}
    k8s = group_spec["template"]["spec"]["containers"][0].get("resources") or {}
    limits, requests = k8s.get("limits") or {}, k8s.get("requests") or {}
    name = HEAD_NODE_TYPE if is_head else group_spec["groupName"]
    out: dict[str, int] = {}
    if "CPU" in group_resources:
        out["CPU"] = _round_up(group_resources["CPU"])
    elif "num-cpus" in params:
        out["CPU"] = int(params["num-cpus"])
    elif "cpu" in limits or "cpu" in requests:
        out["CPU"] = _round_up(limits["cpu"] if "cpu" in limits else requests["cpu"])
    else:
        raise ValueError(f"worker group {name}: no CPUs in rayStartParams num-cpus or the Ray container's resources")
    if "GPU" in group_resources:
        out["GPU"] = _round_up(group_resources["GPU"])
    elif "num-gpus" in params:
        out["GPU"] = int(params["num-gpus"])
    else:
        gpus = [_round_up(q) for k, q in [*limits.items(), *requests.items()] if k.endswith("gpu")]
        gpus = [g for g in gpus if g > 0]
        if gpus:
            out["GPU"] = gpus[0]
    if "memory" in group_resources:
        out["memory"] = _round_up(group_resources["memory"])
    elif "memory" in params:
        out["memory"] = int(params["memory"])
    elif "memory" in limits or "memory" in requests:
        out["memory"] = _round_up(limits["memory"] if "memory" in limits else requests["memory"])
    out.update(_custom_resources(group_resources, params))
    return out


def node_types(cluster_spec: Mapping[str, Any]) -> dict[str, NodeType]:
    """The node types of a RayCluster spec (a RayService's ``rayClusterConfig``, a RayJob's
    ``rayClusterSpec``): the head (no workers) and each worker group."""
    out = {HEAD_NODE_TYPE: NodeType(HEAD_NODE_TYPE, 0, 0, ray_resources(cluster_spec["headGroupSpec"], is_head=True))}
    for g in cluster_spec.get("workerGroupSpecs") or []:
        hosts = g.get("numOfHosts", 1)
        out[g["groupName"]] = NodeType(
            g["groupName"], g["minReplicas"] * hosts, g["maxReplicas"] * hosts, ray_resources(g)
        )
    return out


def worker_group_spec(shape: WorkerShape, group_name: str) -> dict[str, Any]:
    """What the autoscaler reads of a worker group the manifests render from ``shape``
    (manifests/k8s.py worker_group): bounds, rayStartParams and the Ray container's resources."""
    return {
        "groupName": group_name,
        "minReplicas": shape.min_replicas,
        "maxReplicas": shape.max_replicas,
        "rayStartParams": shape.ray_start_params,
        "template": {"spec": {"containers": [{"resources": {"requests": shape.resources, "limits": shape.resources}}]}},
    }


def cluster_spec(shape: WorkerShape, group_name: str, head: Mapping[str, str] = RAY_HEAD) -> dict[str, Any]:
    """The autoscaler's view of a Ray cluster of the platform: the head (``head``: its pod's
    resources) and one worker group."""
    resources = {"requests": head, "limits": head}
    head_spec = {
        "rayStartParams": RAY_HEAD_START_PARAMS,
        "template": {"spec": {"containers": [{"resources": resources}]}},
    }
    return {"headGroupSpec": head_spec, "workerGroupSpecs": [worker_group_spec(shape, group_name)]}


# ---------------------------------------------------------------------------------------------
# What the workloads ask for
# ---------------------------------------------------------------------------------------------


def demands(plan: Plan) -> list[tuple[str, dict[str, Any], list[Demand]]]:
    """(workload, autoscaler's view of its cluster, its demands) for every Ray cluster of the plan,
    in the plan's order: the bundles each workload's plan declares, against its worker group and
    head (a RayJob's head as sized, a RayService's the default one)."""
    out = []
    for w in plan.planned():
        head = w.head.resources if isinstance(w, JobPlan) else RAY_HEAD
        spec = cluster_spec(w.worker, w.worker_group, head)
        if not w.worker.max_replicas:  # a head-only RayJob (the export) renders no worker group
            spec["workerGroupSpecs"] = []
        out.append((f"{w.kind} {w.name}", spec, list(w.demands)))
    return out


# ---------------------------------------------------------------------------------------------
# Bin-packing, as Ray's resource_demand_scheduler does it
# ---------------------------------------------------------------------------------------------


def resource_demands(bundles: Sequence[Bundle], strategy: str) -> list[dict[str, float]]:
    """A placement group as the autoscaler sees it (``placement_groups_to_resource_demands``):
    PACK and SPREAD bundles one by one, STRICT_PACK as one bundle. No workload here asks for
    STRICT_SPREAD, which the autoscaler places apart."""
    shapes = [dict(b) for b in bundles]
    if strategy == "STRICT_PACK":
        combined: dict[str, float] = {}
        for b in shapes:
            for k, v in b.items():
                combined[k] = combined.get(k, 0.0) + v
        return [combined]
    if strategy not in ("PACK", "SPREAD"):
        raise ValueError(f"placement strategy {strategy!r}: the autoscaling check knows PACK, SPREAD and STRICT_PACK")
    return shapes


def fits(node: Mapping[str, float], bundle: Bundle) -> bool:
    return all(v <= node.get(k, 0.0) for k, v in bundle.items())


def _residual(nodes: Sequence[Mapping[str, float]], bundles: Sequence[Bundle]) -> list[int]:
    free = [dict(n) for n in nodes]
    order = sorted(
        range(len(bundles)),
        key=lambda i: (len(bundles[i]), sum(bundles[i].values()), sorted(bundles[i].items())),
        reverse=True,
    )
    left = []
    for i in order:
        node = next((n for n in free if fits(n, bundles[i])), None)
        if node is None:
            left.append(i)
            continue
        for k, v in bundles[i].items():
            if v:
                node[k] -= v
    return left


def bin_pack_residual(nodes: Sequence[Mapping[str, float]], bundles: Sequence[Bundle]) -> list[dict[str, float]]:
    """The bundles that fit nowhere (``get_bin_pack_residual``): most complex first, then
    heaviest, each on the first node with room."""
    return [dict(bundles[i]) for i in _residual(nodes, bundles)]


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def format_resources(r: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {_num(v)}" for k, v in sorted(r.items())) + "}"


def _lacks(node: NodeType, bundle: Bundle) -> str:
    short = [
        f"{k} {_num(v)} (declares {_num(node.resources.get(k, 0))})"
        for k, v in sorted(bundle.items())
        if v > node.resources.get(k, 0)
    ]
    return f"{node.name} lacks " + ", ".join(short)


def capacity(types: Mapping[str, NodeType]) -> list[Mapping[str, int]]:
    """The most nodes the autoscaler may run: the head and each worker type at max_workers."""
    return [t.resources for t in types.values() for _ in range(1 if t.name == HEAD_NODE_TYPE else t.max_workers)]


def check(workload: str, types: Mapping[str, NodeType], wanted: Sequence[Demand]) -> list[str]:
    """One line per demand with a bundle no node type can host; then one per demand whose
    bundles, at its count, find no room on the head and every worker group at its maxReplicas."""
    out: list[str] = []
    infeasible = set()
    for d in wanted:
        bundle = next(
            (
                b
                for b in resource_demands(d.bundles, d.strategy)
                if not any(fits(t.resources, b) for t in types.values())
            ),
            None,
        )
        if bundle is None:
            continue
        infeasible.add(d.who)
        out.append(
            f"{d.key}: {workload}, {d.who}: a bundle {format_resources(bundle)} fits no node type KubeRay's "
            f"autoscaler knows ({'; '.join(_lacks(t, bundle) for t in types.values())}): it starts no worker pod "
            f"for it, and {d.unit} beyond the pods already running never start; allowed: a worker group whose "
            f"spec declares at least {format_resources(bundle)} (rayStartParams num-cpus, num-gpus, resources)"
        )
    tagged = [(d, b) for d in wanted for _ in range(d.count) for b in resource_demands(d.bundles, d.strategy)]
    left = [tagged[i] for i in _residual(capacity(types), [b for _, b in tagged])]
    nodes = ", ".join(f"{t.name} x{1 if t.name == HEAD_NODE_TYPE else t.max_workers}" for t in types.values())
    for d in wanted:
        mine = [b for dd, b in left if dd is d]
        if mine and d.who not in infeasible:
            total = sum(1 for dd, _ in tagged if dd is d)
            out.append(
                f"{d.key}: {workload}, {d.who}: at {d.count} {d.unit}, {len(mine)} of its {total} bundles "
                f"(such as {format_resources(mine[0])}) find no room on the most nodes the autoscaler may run "
                f"({nodes}); allowed: at most what the worker groups hold at their maxReplicas"
            )
    return out


def problems(plan: Plan) -> list[str]:
    """Every workload's bundles against the node types of its Ray cluster (empty: all fit)."""
    out = []
    for workload, spec, wanted in demands(plan):
        out += check(workload, node_types(spec), wanted)
    return out
