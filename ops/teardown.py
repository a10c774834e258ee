"""``teardown``: what has to go before ``cdk destroy`` can delete the heads' security group, the
subnets and the VPC.

Each Ray head pod has a branch network interface of its own (EKS security groups for pods,
constructs/ray_heads.py), which the VPC resource controller creates on the node's trunk
interface and tags ``vpcresources.k8s.aws/trunk-eni-id``. The controller deletes a branch
interface when its pod goes, but not with the cluster: one left behind holds the heads' group,
its subnet and so the VPC, and ``cdk destroy`` fails after the clusters are gone. So, while the
cluster still runs: delete every Ray workload (RayJobs, RayServices and RayClusters of their
own) in the workloads' and the teams' namespaces, and wait until no branch interface of the
heads' group is left.

Without ``act`` (the command's default) it only lists what it would delete and the interfaces
there are now. Gathering (Kubernetes lists, ``ec2:DescribeNetworkInterfaces``) is apart from
the waiting loop, which takes its clock and sleep from the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from config.environment import EnvironmentConfig
from config.facts.names import RAY_HEADS_SECURITY_GROUP_DESCRIPTION, WORKLOADS_NAMESPACE, stack_prefix
from ops.errors import OpsError

# What teardown deletes, in this order. A RayCluster that a RayJob or RayService owns goes with
# its owner; one of its own (applied by hand) is deleted here.
RAY_KINDS = ("RayJob", "RayService", "RayCluster")
# The tag the VPC resource controller puts on each branch interface (the trunk it hangs off).
TRUNK_TAG = "vpcresources.k8s.aws/trunk-eni-id"


@dataclass(frozen=True)
class Workload:
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def namespaces(config: EnvironmentConfig) -> list[str]:
    """The workloads' namespace and every team's."""
    return [WORKLOADS_NAMESPACE, *(t.resolved_namespace for t in config.teams)]


def ray_workloads(kube: Any, config: EnvironmentConfig) -> list[Workload]:
    found = []
    for ns in namespaces(config):
        for kind in RAY_KINDS:
            for obj in kube.list_ray(kind, ns):
                meta = obj.get("metadata") or {}
                if kind == "RayCluster" and meta.get("ownerReferences"):
                    continue
                found.append(Workload(kind, ns, meta["name"]))
    return found


def cluster_stack(config: EnvironmentConfig) -> str:
    return f"{stack_prefix(config.name_prefix)}Cluster"


def heads_security_group(aws: Any, config: EnvironmentConfig) -> str | None:
    """The Ray heads' group of the environment's cluster stack; None when there is none (the
    stack is gone, or was never deployed)."""
    groups = aws.paginate(
        "ec2",
        "describe_security_groups",
        "SecurityGroups",
        Filters=[
            {"Name": "tag:aws:cloudformation:stack-name", "Values": [cluster_stack(config)]},
            {"Name": "description", "Values": [RAY_HEADS_SECURITY_GROUP_DESCRIPTION]},
        ],
    )
    return groups[0]["GroupId"] if groups else None


def branch_interfaces(aws: Any, group_id: str) -> list[dict[str, Any]]:
    """The branch interfaces (security groups for pods) in the heads' group."""
    return aws.paginate(
        "ec2",
        "describe_network_interfaces",
        "NetworkInterfaces",
        Filters=[
            {"Name": "interface-type", "Values": ["branch"]},
            {"Name": "group-id", "Values": [group_id]},
        ],
    )


def describe_interface(eni: dict[str, Any]) -> str:
    tags = {t.get("Key"): t.get("Value") for t in eni.get("TagSet") or []}
    parts = [eni.get("NetworkInterfaceId", "?"), str(eni.get("Status", "?"))]
    if tags.get(TRUNK_TAG):
        parts.append(f"trunk {tags[TRUNK_TAG]}")
    if eni.get("PrivateIpAddress"):
        parts.append(str(eni["PrivateIpAddress"]))
    return " ".join(parts)


def destroy_command(config: EnvironmentConfig) -> str:
    return f"npx cdk destroy --all -c env={config.name}"


def teardown(
    config: EnvironmentConfig,
    aws: Any,
    kube: Any,
    *,
    act: bool,
    timeout_s: float,
    poll_s: float,
    emit: Callable[[str], None],
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    prog: str = "hpray",
) -> dict[str, Any]:
    """List (``act`` False) or delete the Ray workloads and wait for the heads' branch interfaces
    to be gone. Returns what was found and done; raises OpsError when ``timeout_s`` passes first."""
    workloads = ray_workloads(kube, config)
    group = heads_security_group(aws, config)
    interfaces = branch_interfaces(aws, group) if group else []
    result: dict[str, Any] = {
        "environment": config.name,
        "workloads": [str(w) for w in workloads],
        "heads_security_group": group,
        "branch_interfaces": [e.get("NetworkInterfaceId") for e in interfaces],
        "acted": act,
    }
    verb = "deletes" if act else "would delete"
    emit(
        f"{len(workloads)} Ray workload(s) in {', '.join(namespaces(config))}"
        + (f": teardown {verb}" if workloads else "")
        + "".join(f"\n  {w}" for w in workloads)
    )
    if group is None:
        emit(f"no Ray heads' security group of stack {cluster_stack(config)}: no branch interfaces to wait for")
    else:
        emit(
            f"{len(interfaces)} branch interface(s) in the Ray heads' group {group}"
            + "".join(f"\n  {describe_interface(e)}" for e in interfaces)
        )
    if not act:
        emit(
            f"dry run: nothing deleted. To act: {prog} teardown --env {config.name} --yes (deletes the workloads "
            f"above and waits until no branch interface is left), then {destroy_command(config)}"
        )
        return result
    for w in workloads:
        kube.delete_ray(w.kind, w.namespace, w.name)
    start = clock()
    while True:
        left = ray_workloads(kube, config)
        interfaces = branch_interfaces(aws, group) if group else []
        waited = clock() - start
        if not left and not interfaces:
            emit(f"no Ray workload and no branch interface left after {waited:.0f} s: run {destroy_command(config)}")
            result.update(waited_s=round(waited), workloads_left=[], branch_interfaces_left=[])
            return result
        if waited >= timeout_s:
            raise OpsError(
                f"after {waited:.0f} s {len(left)} Ray workload(s) and {len(interfaces)} branch interface(s) "
                f"of the heads' group {group} are still there: "
                + ", ".join([str(w) for w in left] + [describe_interface(e) for e in interfaces]),
                "a workload stuck deleting: kubectl get rayjobs,rayservices,rayclusters,pods -A; an interface "
                "'available' whose pod is gone was left by the controller: aws ec2 delete-network-interface "
                "--network-interface-id ID; then run hpray teardown again before cdk destroy",
            )
        emit(
            f"waiting ({waited:.0f} s of {timeout_s:.0f} s): {len(left)} Ray workload(s), "
            f"{len(interfaces)} branch interface(s) left"
        )
        sleep(poll_s)
