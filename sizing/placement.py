"""Placement: every pod the platform runs fits the node pool it selects.

Pods are generic (sizing/scheduling.py: requests, nodeSelector, required node affinity,
tolerations, DaemonSet or not); ``pod_from_spec`` reads one from a Kubernetes PodSpec, so pods
rendered from Helm charts can be placed like the ones sizing/pods.py builds. The workloads' pods
come from the environment's plan (sizing/plan.py), derived once.

``check_against(env)`` places every pod in three situations and returns one line per misfit:
- as configured: training and both services at their maximum replicas, at once;
- a RayService upgrade: a second Ray cluster per service beside the running one (NewCluster);
- HyperPod replacing a node: one node of a group gone. The services keep their minimum replicas
  there; training pods beyond the remaining nodes wait for the replacement (Ray Train restarts
  the worker group when it is back), the others keep their nodes.
Pods are placed first-fit, largest first, one node at a time (DaemonSets on every node they
select), as the scheduler must be able to: a pod that fits no node is a misfit. ``problems(env)``
is what the loader reports: the training job's checks, then every misfit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from config import catalog
from config.environment import EnvironmentConfig
from config.facts import addons, names
from sizing import autoscaling
from sizing.plan import PRETOKENIZE, JobPlan, Plan, Unplanned
from sizing.pods import RAY_HEAD, daemonsets, head_pod, known, pools, system_pool, worker_pod
from sizing.scheduling import (
    Placement,
    Pod,
    Selection,
    cpu_millis,
    format_cpu,
    format_memory,
    memory_mib,
    place,
    pod_from_spec,
)
from sizing.storage import burst_problems, capacity_problems, data_problems


def pool_problems(env: EnvironmentConfig) -> list[str]:
    """The `system` pool must be known (the Ray heads run there). A HyperPod group the catalog has
    no facts for (a CPU type, say) runs only DaemonSets: it is left out of the check."""
    try:
        system_pool(env.eks)
    except KeyError as err:
        return [
            f"eks.system_nodes.instance_type: {err.args[0]}; add its vCPUs, memory and ENI "
            "limits to config/catalog.py and config/eni_limits.json (the placement check needs them)"
        ]
    used = set()
    training_group = env.training.group(env.hyperpod.instance_groups)
    if training_group is not None:
        used.add(training_group.name)
    try:
        used.add(env.inference.resolved_instance_group(env.hyperpod).name)
        if env.inference.llm.enabled:
            used.add(env.inference.resolved_llm_group(env.hyperpod).name)
    except KeyError:
        pass
    return [
        f"hyperpod.instance_groups[{i}].instance_type: {g.instance_type!r} runs Ray workers but has "
        "no ENI limits in config/eni_limits.json (the placement check needs them)"
        for i, g in enumerate(env.hyperpod.instance_groups)
        if g.name in used and not known(g)
    ]


def team_problems(env: EnvironmentConfig, plan: Plan) -> list[str]:
    """Each team's quota (config teams) holds at least one ``hpray submit job`` job: a Ray head
    (system nodes) and one whole node's worker pod of a GPU instance group (the job commands ask
    whole nodes), else every job of the team is refused by its ResourceQuota."""
    gpu_groups = [g for g in env.hyperpod.instance_groups if g.is_gpu and known(g)]
    head_cpu, head_mem = cpu_millis(RAY_HEAD["cpu"]), memory_mib(RAY_HEAD["memory"])
    out = []
    for i, team in enumerate(getattr(env, "teams", None) or []):
        q = team.quota
        if q.gpus == 0 or not gpu_groups:
            continue
        fitting = []
        for g in gpu_groups:
            w = plan.job_workers[g.name]
            if (
                w.gpus <= q.gpus
                and w.cpus * 1000 + head_cpu <= q.cpus * 1000
                and (w.memory_gib * 1024 + head_mem <= q.memory_gib * 1024)
            ):
                fitting.append(g.name)
        if not fitting:
            smallest = min((plan.job_workers[g.name] for g in gpu_groups), key=lambda w: (w.gpus, w.cpus, w.memory_gib))
            out.append(
                f"teams[{i}].quota: gpus {q.gpus}, cpus {q.cpus}, memory_gib {q.memory_gib} hold no job of team "
                f"{team.name!r}: one job is a Ray head ({RAY_HEAD['cpu']} CPU, {RAY_HEAD['memory']}) and at least one "
                f"whole node's worker pod (smallest: {smallest.instance_type} in {smallest.group!r}, {smallest.gpus} GPUs, "
                f"{smallest.cpus} CPUs, {smallest.memory_gib} GiB); allowed: gpus 0 (no GPU jobs), or at least "
                f"gpus {smallest.gpus}, cpus {smallest.cpus + 1}, memory_gib {smallest.memory_gib + 4}"
            )
    return out


def team_rows(env: EnvironmentConfig) -> list[str]:
    """Where each team's job pods run: heads on the system pool, workers on whole GPU nodes, up
    to the team's quota."""
    rows = []
    for team in getattr(env, "teams", None) or []:
        q = team.quota
        groups = [
            f"{g.name} ({g.instance_type}, {catalog.instance_spec(g.instance_type).gpus} GPUs/node: "
            f"at most {q.gpus // catalog.instance_spec(g.instance_type).gpus} nodes)"
            for g in env.hyperpod.instance_groups
            if g.is_gpu and known(g)
        ]
        rows.append(
            f"  [team {team.name}] namespace {team.resolved_namespace}: Ray heads on {names.SYSTEM_NODEGROUP} "
            f"({RAY_HEAD['cpu']} CPU, {RAY_HEAD['memory']} each, at most {q.rayjobs} RayJobs); workers on whole nodes of "
            + (", ".join(groups) or "no GPU instance group")
            + f"; quota {q.gpus} GPUs, {q.cpus} CPUs, {q.memory_gib} GiB"
        )
    return rows


def platform_pods(
    env: EnvironmentConfig, situation: str = "configured", *, lost_group: str | None = None, plan: Plan
) -> list[Pod]:
    """Every pod of the platform in ``situation``: "configured", "upgrade" (a second cluster per
    RayService) or "node-loss" (``lost_group`` has one node fewer). The workloads are those of
    ``plan`` (default: the built-in workloads' plan of ``env``; manifests/registry.py passes the
    registry's): a RayJob's sized head and its workers, a RayService's head with its autoscaler
    and its workers, in the plan's order. A workload without a plan has no pods to place
    (rendering it says why)."""
    pods = daemonsets(env)
    pods.append(
        pod_from_spec(
            "coredns",
            {
                "nodeSelector": addons.COREDNS_CONFIGURATION["nodeSelector"],
                "containers": [{"resources": addons.COREDNS_CONFIGURATION["resources"]}],
            },
            replicas=addons.COREDNS_CONFIGURATION["replicaCount"],
        )
    )
    pods.append(
        pod_from_spec(
            "kuberay-operator",
            {"nodeSelector": dict(names.SYSTEM_NODE_SELECTOR), "containers": [{"resources": addons.KUBERAY_RESOURCES}]},
        )
    )
    strategy = env.inference.upgrade_strategy
    for w in plan.planned():
        name, shape, group = f"{w.kind} {w.name}", w.worker, w.group
        if isinstance(w, JobPlan):
            # HTTPMode (manifests/rayjob.py): the operator submits to the head's dashboard, so a
            # RayJob has no submitter pod.
            pods.append(head_pod(f"{name} head", autoscaler=False, resources=w.head.resources))
            replicas = shape.max_replicas
            if situation == "node-loss" and lost_group == group.name:
                replicas = min(replicas, group.instance_count - 1)
            if replicas > 0:
                pods.append(worker_pod(f"{name} worker", shape, group, replicas))
            continue
        copies = [("", shape.max_replicas)]
        if situation == "node-loss":
            copies = [("", shape.min_replicas)]
        elif situation == "upgrade" and strategy == "NewCluster":
            copies.append((" (upgrade: new cluster)", shape.max_replicas))
        elif situation == "upgrade" and strategy == "NewClusterWithIncrementalUpgrade":
            copies.append((" (upgrade: new cluster)", shape.min_replicas))
        for suffix, replicas in copies:
            pods.append(head_pod(f"{name}{suffix} head", autoscaler=True))
            if replicas > 0:
                pods.append(worker_pod(f"{name}{suffix} worker", shape, group, replicas))
    return pods


def _with(pods: list[Pod], extra: Sequence[Pod]) -> list[Pod]:
    """``pods`` with ``extra`` instead of the pods of the same names (rendered chart pods in place
    of the ones built from the values this app sets)."""
    replaced = {p.name for p in extra}
    return [p for p in pods if p.name not in replaced] + list(extra)


def situations(env: EnvironmentConfig, extra_pods: Sequence[Pod] = (), *, plan: Plan) -> list[Placement]:
    """The placements ``check_against`` checks: as configured, a RayService upgrade, and one
    node lost in each HyperPod group with nodes. ``extra_pods`` are placed in every situation."""
    all_pools = pools(env)
    # The situations place mostly the same pods on mostly the same pools: which pool each pod
    # may use is judged once for all of them.
    selection = Selection()
    out = [
        place(
            all_pools, _with(platform_pods(env, plan=plan), extra_pods), situation="as configured", selection=selection
        )
    ]
    if env.inference.upgrade_strategy != "None" and any(w.kind == "RayService" for w in plan.planned()):
        out.append(
            place(
                all_pools,
                _with(platform_pods(env, "upgrade", plan=plan), extra_pods),
                situation="RayService upgrade",
                selection=selection,
            )
        )
    for g in env.hyperpod.instance_groups:
        if g.instance_count < 1 or not known(g):
            continue
        fewer = [replace(p, nodes=p.nodes - 1) if p.name == g.name else p for p in all_pools]
        out.append(
            place(
                fewer,
                _with(platform_pods(env, "node-loss", lost_group=g.name, plan=plan), extra_pods),
                situation=f"HyperPod replacing a node of {g.name}",
                selection=selection,
            )
        )
    return out


def check_against(env: EnvironmentConfig, extra_pods: Sequence[Pod] = (), *, plan: Plan) -> list[str]:
    """Every misfit in every situation, one line each (empty when everything fits).

    ``extra_pods``: pods rendered elsewhere, for example from the real Helm charts
    (``constructs.chart_pods.scheduling_pods``), built with
    ``pod_from_spec(name, rendered["spec"]["template"]["spec"], daemonset=kind == "DaemonSet",
    replicas=...)``; a pod named like one of ``platform_pods`` ("kuberay-operator",
    "nvidia-device-plugin", "aws-efa-k8s-device-plugin", ...) takes its place."""
    problems = pool_problems(env)
    if problems:
        return problems
    seen: list[str] = []
    for p in situations(env, extra_pods, plan=plan):
        seen.extend(m for m in p.misfits if m not in seen)
    return seen + team_problems(env, plan)


def table(env: EnvironmentConfig, plan: Plan) -> list[list[str]]:
    """Rows (situation, pool, nodes, pods, CPU, memory, GPUs) of what each pool holds."""
    rows = []
    for p in situations(env, plan=plan):
        for pool in p.pools:
            used = p.used(pool)
            a = pool.allocatable
            pods = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in sorted(p.pods_on(pool).items()))
            rows.append(
                [
                    p.situation,
                    pool.name,
                    f"{pool.nodes} x {pool.instance_type}",
                    pods,
                    f"{format_cpu(used['cpu'])} / {format_cpu(a.cpu_millis * pool.nodes)}",
                    f"{format_memory(used['memory'])} / {format_memory(a.memory_mib * pool.nodes)}",
                    f"{used['gpus']} / {pool.gpus * pool.nodes}",
                ]
            )
    return rows


TABLE_HEADERS = [
    "Situation",
    "Pool",
    "Nodes",
    "Pods",
    "CPU used / allocatable",
    "Memory used / allocatable",
    "GPUs used / allocatable",
]


def render_table(env: EnvironmentConfig, plan: Plan) -> str:
    """The placement as text (``python -m manifests check ENV``, run by `make synth`)."""
    lines = [f"Placement of {env.name}: every pod on the node pool it selects (used / allocatable)"]
    for situation, pool, nodes, pods, cpu, mem, gpus in table(env, plan):
        lines.append(f"  [{situation}] {pool} ({nodes}): cpu {cpu}, memory {mem}, gpus {gpus}")
        lines.append(f"      {pods or '(no pods)'}")
    return "\n".join(lines + team_rows(env))


def problems(env: EnvironmentConfig, plan: Plan) -> list[str]:
    """What the loader reports over the plan (default: the built-in workloads' plan of ``env``;
    manifests/check.py passes the registry's): the training job's checks against its group, then
    (when those pass) every misfit of ``check_against``, every bundle Ray's autoscaler could not
    place (sizing/autoscaling.py) and the checkpoint burst against FSx (sizing/storage.py). A
    cluster with no GPU group and no
    ``training.instance_group`` has no training job to check (rendering the RayJob says so)."""
    t = env.training
    if t.instance_group is None and t.group(env.hyperpod.instance_groups) is None:
        out: list[str] = []
    else:
        out = list(plan.training_problems)
    if out:
        return out
    burst = [] if plan.checkpoint is None else burst_problems(plan.checkpoint)
    # The pretokenize job's own problems (its group, its CPUs): the plan keeps them.
    data = plan.workloads.get(PRETOKENIZE)
    out += list(data.problems) if isinstance(data, Unplanned) else []
    capacity = [] if plan.checkpoint is None else capacity_problems(env, plan.checkpoint)
    if not burst and plan.floor_checkpoint is not None:
        burst = [
            f"training.min_workers: {env.training.min_workers} (the shrink floor): {line}"
            for line in burst_problems(plan.floor_checkpoint)
        ]
    return out + check_against(env, plan=plan) + autoscaling.problems(plan) + burst + capacity + data_problems(env)
