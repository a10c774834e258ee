"""Kubernetes scheduling, the part the placement check needs: generic pods and node pools,
which pool a pod may use (nodeSelector, required node affinity, taints and tolerations), and
first-fit placement on each node's allocatable CPU, memory, GPUs, EFA interfaces and pod slots.

``pod_from_spec`` reads a pod from a Kubernetes PodSpec, so pods rendered from Helm charts are
placed like the ones sizing/pods.py builds. Pure: no Kubernetes API, no aws_cdk.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from config import catalog
from config.facts import names

_MEMORY_UNITS = {
    "": 1,
    "k": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
}


def cpu_millis(quantity: str | int | float) -> int:
    """A Kubernetes CPU quantity ("500m", "2", 1.5) in millicores."""
    text = str(quantity)
    if text.endswith("m"):
        return int(text[:-1])
    return math.ceil(float(text) * 1000)


def memory_mib(quantity: str | int) -> int:
    """A Kubernetes memory quantity ("512Mi", "16Gi", "1G", bytes) in MiB, rounded up."""
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(quantity))
    if not m or m.group(2) not in _MEMORY_UNITS:
        raise ValueError(f"{quantity!r} is not a Kubernetes memory quantity")
    return math.ceil(float(m.group(1)) * _MEMORY_UNITS[m.group(2)] / 1024**2)


def format_cpu(millis: int) -> str:
    return f"{millis / 1000:g}"


def format_memory(mib: int) -> str:
    return f"{mib / 1024:.1f}Gi"


@dataclass(frozen=True)
class Pool:
    """Identical nodes: the `system` node group or one HyperPod instance group."""

    name: str
    instance_type: str
    nodes: int
    allocatable: catalog.Allocatable
    gpus: int
    efa: int
    labels: Mapping[str, str]
    taints: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Pod:
    """What the scheduler looks at. ``affinity`` holds the required node-affinity terms (any
    term, all its expressions); ``tolerations`` (key, operator, value, effect) with None for an
    empty field; ``replicas`` identical pods, or one per selected node when ``daemonset``."""

    name: str
    cpu_millis: int
    memory_mib: int
    gpus: int = 0
    efa: int = 0
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] = ()
    tolerations: tuple[tuple[str | None, str, str | None, str | None], ...] = ()
    daemonset: bool = False
    replicas: int = 1


def _requests(resources: Mapping[str, Any]) -> dict[str, str]:
    # Kubernetes defaults a missing request to the limit.
    return {**resources.get("limits", {}), **resources.get("requests", {})}


def pod_from_spec(name: str, spec: Mapping[str, Any], *, replicas: int = 1, daemonset: bool = False) -> Pod:
    """A ``Pod`` from a Kubernetes PodSpec (a Deployment's or DaemonSet's ``spec.template.spec``):
    the containers' requests summed (an init container's when larger), nodeSelector, required
    node affinity and tolerations."""
    totals = {"cpu": 0, "memory": 0, names.GPU_RESOURCE: 0, names.EFA_RESOURCE: 0}

    def add(into: dict[str, int], container: Mapping[str, Any]) -> None:
        req = _requests(container.get("resources") or {})
        into["cpu"] += cpu_millis(req["cpu"]) if "cpu" in req else 0
        into["memory"] += memory_mib(req["memory"]) if "memory" in req else 0
        for ext in (names.GPU_RESOURCE, names.EFA_RESOURCE):
            into[ext] += int(req.get(ext, 0))

    for c in spec.get("containers", []):
        add(totals, c)
    for c in spec.get("initContainers", []):
        one = dict.fromkeys(totals, 0)
        add(one, c)
        totals = {k: max(v, one[k]) for k, v in totals.items()}
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = tuple(
        tuple((e["key"], e["operator"], tuple(e.get("values", ()))) for e in term.get("matchExpressions", []))
        for term in required.get("nodeSelectorTerms", [])
    )
    tolerations = tuple(
        (t.get("key"), t.get("operator", "Equal"), t.get("value"), t.get("effect"))
        for t in spec.get("tolerations") or []
    )
    return Pod(
        name=name,
        cpu_millis=totals["cpu"],
        memory_mib=totals["memory"],
        gpus=totals[names.GPU_RESOURCE],
        efa=totals[names.EFA_RESOURCE],
        node_selector=dict(spec.get("nodeSelector") or {}),
        affinity=terms,
        tolerations=tolerations,
        daemonset=daemonset,
        replicas=replicas,
    )


def _expression_matches(labels: Mapping[str, str], key: str, op: str, values: tuple[str, ...]) -> bool:
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError(f"node affinity operator {op!r} is not supported by the placement check")


def _tolerates(pod: Pod, taint: tuple[str, str, str]) -> bool:
    key, value, effect = taint
    for t_key, op, t_value, t_effect in pod.tolerations:
        if t_effect not in (None, "", effect):
            continue
        if t_key in (None, "") and op == "Exists":
            return True
        if t_key == key and (op == "Exists" or (t_value or "") == value):
            return True
    return False


def selects(pod: Pod, pool: Pool) -> bool:
    """Whether the scheduler may put ``pod`` on a node of ``pool`` (labels and taints only)."""
    if any(pool.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    if pod.affinity and not any(all(_expression_matches(pool.labels, *e) for e in term) for term in pod.affinity):
        return False
    return all(_tolerates(pod, t) for t in pool.taints if t[2] in ("NoSchedule", "NoExecute"))


@dataclass
class _Node:
    pool: Pool
    index: int
    cpu: int
    memory: int
    gpus: int
    efa: int
    pods: int
    placed: list[str] = field(default_factory=list)

    def fits(self, pod: Pod) -> bool:
        return (
            pod.cpu_millis <= self.cpu
            and pod.memory_mib <= self.memory
            and pod.gpus <= self.gpus
            and pod.efa <= self.efa
            and self.pods >= 1
        )

    def take(self, pod: Pod) -> None:
        self.cpu -= pod.cpu_millis
        self.memory -= pod.memory_mib
        self.gpus -= pod.gpus
        self.efa -= pod.efa
        self.pods -= 1
        self.placed.append(pod.name)


def _requested(pod: Pod) -> str:
    parts = [f"cpu {format_cpu(pod.cpu_millis)}", f"memory {format_memory(pod.memory_mib)}"]
    if pod.gpus:
        parts.append(f"{names.GPU_RESOURCE} {pod.gpus}")
    if pod.efa:
        parts.append(f"{names.EFA_RESOURCE} {pod.efa}")
    return ", ".join(parts)


def _allocatable(pool: Pool) -> str:
    a = pool.allocatable
    parts = [f"cpu {format_cpu(a.cpu_millis)}", f"memory {format_memory(a.memory_mib)}", f"pods {a.pods}"]
    if pool.gpus:
        parts.append(f"{names.GPU_RESOURCE} {pool.gpus}")
    if pool.efa:
        parts.append(f"{names.EFA_RESOURCE} {pool.efa}")
    return ", ".join(parts)


@dataclass
class Placement:
    """The outcome of placing pods on pools: per node what is left, and every misfit."""

    situation: str
    pools: list[Pool]
    nodes: list[_Node]
    misfits: list[str]

    def used(self, pool: Pool) -> dict[str, int]:
        nodes = [n for n in self.nodes if n.pool.name == pool.name]
        a = pool.allocatable
        return {
            "cpu": sum(a.cpu_millis - n.cpu for n in nodes),
            "memory": sum(a.memory_mib - n.memory for n in nodes),
            "gpus": sum(pool.gpus - n.gpus for n in nodes),
            "pods": sum(a.pods - n.pods for n in nodes),
        }

    def pods_on(self, pool: Pool) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            if n.pool.name == pool.name:
                for p in n.placed:
                    counts[p] = counts.get(p, 0) + 1
        return counts


class Selection:
    """``selects`` remembered across placements of the same pods on the same pools (the placement
    check's situations place the platform's pods again for every HyperPod group that loses a
    node). A pod or a pool is reduced to the fields ``selects`` reads (nodeSelector, node
    affinity and tolerations; labels and taints), and a pod's pools are judged once per list
    of pools that are alike in those fields."""

    def __init__(self) -> None:
        # id(pod or pool) -> (the object, its interned key): holding the object keeps its id unique.
        self._objects: dict[int, tuple[Pod | Pool, int]] = {}
        self._keys: dict[tuple[Any, ...], int] = {}
        self._chosen: dict[tuple[int, tuple[int, ...]], tuple[int, ...]] = {}

    def _key(self, obj: Pod | Pool) -> int:
        known = self._objects.get(id(obj))
        if known is not None and known[0] is obj:
            return known[1]
        if isinstance(obj, Pod):
            fields: tuple[Any, ...] = ("pod", tuple(obj.node_selector.items()), obj.affinity, obj.tolerations)
        else:
            fields = ("pool", tuple(obj.labels.items()), obj.taints)
        key = self._keys.setdefault(fields, len(self._keys))
        self._objects[id(obj)] = (obj, key)
        return key

    def pools_of(self, pods: Sequence[Pod], pool_list: Sequence[Pool]) -> list[tuple[int, ...]]:
        """For each of ``pods``, the indexes in ``pool_list`` of the pools it may use."""
        pools_key = tuple(self._key(p) for p in pool_list)
        out = []
        for pod in pods:
            memo = (self._key(pod), pools_key)
            chosen = self._chosen.get(memo)
            if chosen is None:
                chosen = self._chosen[memo] = tuple(i for i, p in enumerate(pool_list) if selects(pod, p))
            out.append(chosen)
        return out


def place(
    pool_list: Sequence[Pool],
    pods: Iterable[Pod],
    *,
    situation: str = "as configured",
    selection: Selection | None = None,
) -> Placement:
    """Place ``pods`` on the nodes of ``pool_list``: DaemonSets on every node they select, then the
    rest first-fit, largest first (GPUs, then CPU, then memory). ``selection``: one shared by
    several placements of the same pods and pools (each pod's pools are judged once)."""
    by_pool = [
        [
            _Node(p, i, p.allocatable.cpu_millis, p.allocatable.memory_mib, p.gpus, p.efa, p.allocatable.pods)
            for i in range(p.nodes)
        ]
        for p in pool_list
    ]
    nodes = [n for pool_nodes in by_pool for n in pool_nodes]
    selection = selection or Selection()
    misfits: list[str] = []
    pods = list(pods)
    chosen = selection.pools_of(pods, pool_list)
    for pod, pools in zip(pods, chosen, strict=True):
        # A DaemonSet whose selector matches no node runs no pod (the NVIDIA chart's MPS control
        # daemon waits for nodes labelled for MPS); a Deployment's pod that matches none is Pending.
        if not pod.daemonset and not pools:
            misfits.append(
                f"placement ({situation}): pod {pod.name!r} selects no node pool (nodeSelector "
                f"{dict(pod.node_selector)}, {len(pod.affinity)} node-affinity term(s), "
                f"{len(pod.tolerations)} toleration(s)); pools: {', '.join(p.name for p in pool_list)}"
            )
    for pod, pools in zip(pods, chosen, strict=True):
        if not pod.daemonset:
            continue
        for node in (n for i in pools for n in by_pool[i]):
            if not node.fits(pod):
                misfits.append(_misfit(situation, pod, node.pool, [node]))
                continue
            node.take(pod)
    singles = [(pod, pools) for pod, pools in zip(pods, chosen, strict=True) if not pod.daemonset and pools]
    for pod, pools in sorted(singles, key=lambda s: (-s[0].gpus, -s[0].cpu_millis, -s[0].memory_mib)):
        eligible = [n for i in pools for n in by_pool[i]]
        for _ in range(pod.replicas):
            free = next((n for n in eligible if n.fits(pod)), None)
            if free is None:
                misfits.append(_misfit(situation, pod, pool_list[pools[0]], eligible))
                break
            free.take(pod)
    return Placement(situation=situation, pools=list(pool_list), nodes=nodes, misfits=misfits)


def _misfit(situation: str, pod: Pod, pool: Pool, nodes: list[_Node]) -> str:
    placed = sum(1 for n in nodes for name in n.placed if name == pod.name)
    count = "one pod per node" if pod.daemonset else f"{placed} of {pod.replicas} placed"
    if nodes:
        best = max(nodes, key=lambda n: (n.gpus, n.cpu, n.memory))
        free = (
            f"cpu {format_cpu(best.cpu)}, memory {format_memory(best.memory)}"
            + (f", {names.GPU_RESOURCE} {best.gpus}" if pool.gpus else "")
            + f", pods {best.pods}"
        )
    else:
        free = "no nodes"
    return (
        f"placement ({situation}): pod {pod.name!r} does not fit node pool {pool.name!r} "
        f"({pool.nodes} x {pool.instance_type}, {count}): it requests {_requested(pod)}; a node's "
        f"allocatable is {_allocatable(pool)}; the most left on one node is {free}"
    )
