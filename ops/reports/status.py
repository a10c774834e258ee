"""``status``: the deployed environment at a glance.

Gathering (AWS via ops/clients/aws.py, Kubernetes via ops/clients/kube.py) is separate from the pure
``summarize_*`` functions that turn API objects into the report, and from :func:`render` that
prints it. The report is a plain dict: ``--json`` prints it as is.

One module because it is one command: its gathering, summarizing and rendering steps share the
report's shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from config.environment import EnvironmentConfig
from config.facts import names
from ops.clients.aws import Aws
from ops.errors import CredentialsError, NotFoundError, OpsError
from ops.kuberay import condition, summarize_rayjob, summarize_rayservice
from ops.output import table
from ops.reports.base_image import base_check
from ops.reports.checks import FAIL
from ops.reports.images import image_checks
from ops.reports.names import FILE_SYSTEM_OUTPUT, stack_names
from ops.reports.pod_eni import evaluate_pod_eni

# HyperPod's resilience labels on its Kubernetes nodes (SageMaker HyperPod docs, "Resilience-
# related Kubernetes labels by SageMaker HyperPod").
HEALTH_LABEL = names.HYPERPOD_HEALTH_LABEL
DEEP_HEALTH_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"
FAULT_LABEL_PREFIX = "sagemaker.amazonaws.com/fault-"
HEALTHY = names.HYPERPOD_HEALTHY
HEALTH_MEANING = {
    "Schedulable": "passed health checks",
    "Unschedulable": "deep health checks running",
    "UnschedulablePendingReplacement": "failed health checks; HyperPod replaces it when node recovery is Automatic",
    "UnschedulablePendingReboot": "failed health checks; HyperPod reboots it when node recovery is Automatic",
}


# ---------------------------------------------------------------------------------------------
# Pure: API objects -> report sections
# ---------------------------------------------------------------------------------------------


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def kubernetes_node_for(instance_id: str, k8s_nodes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The Kubernetes Node of a HyperPod instance: HyperPod names its nodes ``hyperpod-<instance-id>``;
    the provider ID is checked too."""
    for node in k8s_nodes:
        name = (node.get("metadata") or {}).get("name", "")
        provider = (node.get("spec") or {}).get("providerID", "")
        if name.endswith(instance_id) or provider.endswith("/" + instance_id):
            return node
    return None


def node_health(k8s_node: dict[str, Any] | None) -> dict[str, Any]:
    """Health of one node from its HyperPod labels and its Ready condition."""
    if k8s_node is None:
        return {"health": "unknown", "healthy": False, "detail": "no Kubernetes node for this instance (yet)"}
    labels = _labels(k8s_node)
    health = labels.get(HEALTH_LABEL, "unlabelled")
    ready = condition(k8s_node, "Ready")
    is_ready = bool(ready and ready.get("status") == "True")
    cordoned = bool((k8s_node.get("spec") or {}).get("unschedulable"))
    faults = {k[len(FAULT_LABEL_PREFIX) :]: v for k, v in labels.items() if k.startswith(FAULT_LABEL_PREFIX)}
    detail = [HEALTH_MEANING.get(health, "no HyperPod health label: health agent not running?")]
    if not is_ready:
        detail.append(f"NotReady ({(ready or {}).get('reason', 'no Ready condition')})")
    if cordoned:
        detail.append("cordoned")
    detail += [f"{k}={v}" for k, v in sorted(faults.items())]
    return {
        "health": health,
        "healthy": health == HEALTHY and is_ready and not cordoned,
        "deep_health_check": labels.get(DEEP_HEALTH_LABEL),
        "kubernetes_node": k8s_node["metadata"]["name"],
        "ready": is_ready,
        "detail": "; ".join(detail),
    }


def summarize_hyperpod(
    name: str, cluster: dict[str, Any] | None, nodes: list[dict[str, Any]], k8s_nodes: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """``k8s_nodes`` None: Kubernetes was not reachable, so health is unknown (not unhealthy)."""
    if cluster is None:
        return {"name": name, "status": "NotFound", "problems": [f"HyperPod cluster {name} does not exist"]}
    problems = []
    status = cluster.get("ClusterStatus", "?")
    if status != "InService":
        problems.append(
            f"HyperPod cluster {name} is {status}"
            + (f": {cluster['FailureMessage']}" if cluster.get("FailureMessage") else "")
        )
    groups = []
    for g in cluster.get("InstanceGroups", []):
        current, target = g.get("CurrentCount", 0), g.get("TargetCount", 0)
        groups.append(
            {
                "name": g.get("InstanceGroupName"),
                "instance_type": g.get("InstanceType"),
                "current": current,
                "target": target,
                "status": g.get("Status"),
            }
        )
        if current < target:
            problems.append(f"instance group {g.get('InstanceGroupName')} has {current} of {target} instances")
    rows = []
    for n in sorted(nodes, key=lambda n: (n.get("InstanceGroupName", ""), n.get("InstanceId", ""))):
        instance_status = n.get("InstanceStatus") or {}
        row = {
            "instance_id": n.get("InstanceId"),
            "instance_group": n.get("InstanceGroupName"),
            "instance_type": n.get("InstanceType"),
            "status": instance_status.get("Status"),
            "status_message": instance_status.get("Message"),
            "launch_time": n.get("LaunchTime"),
        }
        if k8s_nodes is None:
            row.update({"health": "unknown", "healthy": None, "detail": "Kubernetes API not reachable"})
        else:
            row.update(node_health(kubernetes_node_for(n.get("InstanceId", ""), k8s_nodes)))
        if row["status"] != "Running":
            problems.append(
                f"node {row['instance_id']} ({row['instance_group']}) is {row['status']}"
                + (f": {row['status_message']}" if row["status_message"] else "")
            )
        elif row["healthy"] is False:
            problems.append(f"node {row['instance_id']} ({row['instance_group']}) is {row['health']}: {row['detail']}")
        rows.append(row)
    return {"name": name, "status": status, "instance_groups": groups, "nodes": rows, "problems": problems}


def summarize_eks(name: str, cluster: dict[str, Any] | None) -> dict[str, Any]:
    if cluster is None:
        return {"name": name, "status": "NotFound", "problems": [f"EKS cluster {name} does not exist"]}
    status = cluster.get("status", "?")
    return {
        "name": name,
        "status": status,
        "version": cluster.get("version"),
        "endpoint": cluster.get("endpoint"),
        "problems": [] if status == "ACTIVE" else [f"EKS cluster {name} is {status}"],
    }


def summarize_fsx(file_system_id: str | None, fs: dict[str, Any] | None) -> dict[str, Any]:
    if file_system_id is None or fs is None:
        what = file_system_id or "(storage stack not deployed)"
        return {
            "file_system_id": file_system_id,
            "lifecycle": "NotFound",
            "problems": [f"FSx for Lustre file system {what} not found"],
        }
    lifecycle = fs.get("Lifecycle", "?")
    problems = (
        []
        if lifecycle == "AVAILABLE"
        else [
            f"FSx {file_system_id} is {lifecycle}"
            + (f": {fs['FailureDetails'].get('Message')}" if fs.get("FailureDetails") else "")
        ]
    )
    return {
        "file_system_id": file_system_id,
        "lifecycle": lifecycle,
        "storage_capacity_gib": fs.get("StorageCapacity"),
        "dns_name": fs.get("DNSName"),
        "problems": problems,
    }


def summarize_operator(deployments: list[dict[str, Any]]) -> dict[str, Any]:
    if not deployments:
        return {
            "ready": False,
            "problems": [
                "KubeRay operator not installed (no Deployment labelled app.kubernetes.io/name=kuberay-operator)"
            ],
        }
    d = deployments[0]
    meta, spec, st = d.get("metadata") or {}, d.get("spec") or {}, d.get("status") or {}
    wanted, ready = spec.get("replicas", 1), st.get("readyReplicas", 0) or 0
    available = condition(d, "Available")
    ok = ready >= wanted > 0 and bool(available and available.get("status") == "True")
    containers: list[dict[str, Any]] = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    image = next(iter(containers), {}).get("image")
    report = {
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "ready_replicas": ready,
        "replicas": wanted,
        "image": image,
        "ready": ok,
        "problems": [],
    }
    if not ok:
        why = (available or {}).get("message") or "no Available condition"
        report["problems"].append(
            f"KubeRay operator {meta.get('namespace')}/{meta.get('name')} not ready: {ready}/{wanted} ready; {why}"
        )
    return report


def problems_of(report: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("hyperpod", "eks", "fsx", "kuberay_operator"):
        out += (report.get(key) or {}).get("problems", [])
    if report.get("kubernetes_error"):
        out.append(f"Kubernetes: {report['kubernetes_error']}")
    out += [
        f"{c['check']}: {c['detail']}; fix: {c['fix']}" for c in report.get("images") or [] if c["status"] != "PASS"
    ]
    return out


# ---------------------------------------------------------------------------------------------
# Human rendering
# ---------------------------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    out = [f"Environment {report['environment']} (account {report['account']}, {report['region']})", ""]
    hp, eks, fsx = report["hyperpod"], report["eks"], report["fsx"]
    out.append(
        table(
            ["COMPONENT", "NAME", "STATUS", "DETAIL"],
            [
                [
                    "HyperPod cluster",
                    hp["name"],
                    hp["status"],
                    ", ".join(f"{g['name']} {g['current']}/{g['target']}" for g in hp.get("instance_groups", []))
                    or None,
                ],
                [
                    "EKS cluster",
                    eks["name"],
                    eks["status"],
                    f"Kubernetes {eks['version']}" if eks.get("version") else None,
                ],
                [
                    "FSx for Lustre",
                    fsx.get("file_system_id"),
                    fsx["lifecycle"],
                    f"{fsx['storage_capacity_gib']} GiB" if fsx.get("storage_capacity_gib") else None,
                ],
                _operator_row(report),
            ],
        )
    )
    if hp.get("nodes"):
        out += ["", "HyperPod nodes"]
        out.append(
            table(
                ["INSTANCE", "GROUP", "TYPE", "STATUS", "HEALTH", "DETAIL"],
                [
                    [n["instance_id"], n["instance_group"], n["instance_type"], n["status"], n["health"], n["detail"]]
                    for n in hp["nodes"]
                ],
            )
        )
    if report.get("kubernetes_error") is None:
        out += ["", "RayJobs"]
        jobs = report.get("rayjobs", [])
        out.append(
            table(
                ["NAMESPACE/NAME", "JOB STATUS", "DEPLOYMENT", "FAILED", "STARTED", "MESSAGE"],
                [
                    [
                        f"{j['namespace']}/{j['name']}",
                        j["job_status"],
                        j["deployment_status"],
                        j["failed_attempts"],
                        j["start_time"],
                        j["message"] or j["reason"],
                    ]
                    for j in jobs
                ],
            )
            if jobs
            else "  (none)"
        )
        out += ["", "RayServices"]
        services = report.get("rayservices", [])
        out.append(
            table(
                ["NAMESPACE/NAME", "STATUS", "READY", "ENDPOINTS", "APPLICATIONS"],
                [
                    [
                        f"{s['namespace']}/{s['name']}",
                        s["service_status"],
                        s["ready"],
                        s["serve_endpoints"],
                        ", ".join(f"{k}={v}" for k, v in s["applications"].items()) or None,
                    ]
                    for s in services
                ],
            )
            if services
            else "  (none)"
        )
    if report.get("pod_eni"):
        check = report["pod_eni"]
        out += ["", f"Security groups for pods: {check['status']}: {check['detail']}"]
        if check.get("fix") and check["status"] != "PASS":
            out.append(f"  fix: {check['fix']}")
    problems = problems_of(report)
    out += [""] + ([f"{len(problems)} problem(s):"] + [f"  - {p}" for p in problems] if problems else ["healthy"])
    return "\n".join(out)


def _operator_row(report: dict[str, Any]) -> list[Any]:
    op = report.get("kuberay_operator")
    if op is None:
        return ["KubeRay operator", None, "unknown", "Kubernetes API not reachable"]
    name = f"{op['namespace']}/{op['name']}" if op.get("name") else None
    detail = f"{op['ready_replicas']}/{op['replicas']} ready, {op['image']}" if op.get("name") else "not installed"
    return ["KubeRay operator", name, "Ready" if op["ready"] else "NotReady", detail]


# ---------------------------------------------------------------------------------------------
# Gathering
# ---------------------------------------------------------------------------------------------


def _or_none(fn: Any) -> Any:
    try:
        return fn()
    except NotFoundError:
        return None


def _file_system_id(aws: Aws, config: EnvironmentConfig) -> str | None:
    stack = _or_none(lambda: aws.call("cloudformation", "describe_stacks", StackName=stack_names(config)["storage"]))
    for s in (stack or {}).get("Stacks", []):
        for o in s.get("Outputs", []):
            if o.get("OutputKey") == FILE_SYSTEM_OUTPUT:
                return o.get("OutputValue")
    return None


def gather(config: EnvironmentConfig, aws: Aws, connect_kube: Any, *, dockerfile: Path | None = None) -> dict[str, Any]:
    """Collect the report. ``connect_kube()`` returns an ops.clients.kube.Kube (or raises KubernetesError).
    ``dockerfile``: the workloads Dockerfile whose base digest is checked (default: the checkout's)."""
    identity = aws.call("sts", "get_caller_identity")
    hp_name, eks_name = config.hyperpod_cluster_name, config.eks_cluster_name
    hp_cluster = _or_none(lambda: aws.call("sagemaker", "describe_cluster", ClusterName=hp_name))
    hp_nodes = (
        aws.paginate("sagemaker", "list_cluster_nodes", "ClusterNodeSummaries", ClusterName=hp_name)
        if hp_cluster
        else []
    )
    eks_cluster = (_or_none(lambda: aws.call("eks", "describe_cluster", name=eks_name)) or {}).get("cluster")
    fs_id = _file_system_id(aws, config)
    fs = None
    if fs_id:
        found = _or_none(lambda: aws.call("fsx", "describe_file_systems", FileSystemIds=[fs_id]))
        fs = next(iter((found or {}).get("FileSystems", [])), None)

    report: dict[str, Any] = {"environment": config.name, "account": identity.get("Account"), "region": config.region}
    k8s_nodes = None
    report["kubernetes_error"] = None
    if eks_cluster is None or eks_cluster.get("status") != "ACTIVE":
        report["kubernetes_error"] = f"EKS cluster {eks_name} is not ACTIVE; Kubernetes checks skipped"
    else:
        try:
            kube = connect_kube()
            k8s_nodes = kube.list_nodes()
            report["kuberay_operator"] = summarize_operator(kube.list_operator_deployments())
            report["rayjobs"] = [summarize_rayjob(o) for o in kube.list_ray("RayJob")]
            report["rayservices"] = [summarize_rayservice(o) for o in kube.list_ray("RayService")]
            # Security groups for pods, the day-one check of docs/security.md: a WARN does not
            # count as a problem (the platform runs; the fix is a decision there).
            heads = kube.list_pods(names.WORKLOADS_NAMESPACE, "ray.io/node-type=head")
            report["pod_eni"] = evaluate_pod_eni(k8s_nodes, heads).as_dict()
        except CredentialsError:
            raise
        except NotFoundError as err:
            # A 404 on a list call: the ray.io/v1 CRDs (KubeRay) are not installed.
            report["kubernetes_error"] = f"{err.message} (are the KubeRay CRDs installed?)"
        except OpsError as err:
            report["kubernetes_error"] = err.message
    report["kuberay_operator"] = report.get("kuberay_operator")
    report["hyperpod"] = summarize_hyperpod(hp_name, hp_cluster, hp_nodes, k8s_nodes)
    report["eks"] = summarize_eks(eks_name, eks_cluster)
    report["fsx"] = summarize_fsx(fs_id, fs)
    # network.images_from_ecr: after the deploy every rule must exist and validate (ops/reports/images.py).
    # The workloads image the deploy built: from a base pinned by digest (ops/reports/base_image.py).
    images = [base_check(dockerfile, deployed=True), *image_checks(config, aws, missing_rule_is=FAIL)]
    report["images"] = [c.as_dict() for c in images]
    report["problems"] = problems_of(report)
    return report
