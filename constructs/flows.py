"""The flow table's vocabulary: the parts of the platform, the ports they use, and the shape of
each kind of row (network, egress, IAM/KMS, Kubernetes RBAC).

The rows themselves are in ``network_flows.py``, ``access_flows.py`` and ``team_flows.py``;
``flow_table.py`` assembles them per environment. The constructs that create the parts import the
port facts from here (``eks_cluster.py`` joins the two node pools with them); ``review/flows.py``
proves each flow against the synthesized templates, in tests per environment and in ``make synth``.
A flow names what it is, why it is needed, and the parts at both ends; the parts are located in
the templates by ``review/flows.py``.

Pods use their node's security groups: the VPC CNI gives pods the node's ENI groups, so a pod
part names the node pool it runs on. The exception is the Ray heads: security groups for pods
(https://docs.aws.amazon.com/eks/latest/userguide/security-groups-for-pods.html) gives them a
group of their own (constructs/ray_heads.py), so the GCS store can admit them and no other pod
of the system nodes; ``network_flows.denied_flows`` lists what must stay closed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from config.facts.jobs import JOBS_PREFIX
from manifests import k8s

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig

Protocol = Literal["tcp", "udp", "all"]

# ---------------------------------------------------------------------------------------------
# Parts
# ---------------------------------------------------------------------------------------------

# Where a part sits on the network; review/flows.py finds each in the templates.
Attachment = Literal[
    "system-nodes",  # the EKS managed node group 'system' (EKS-created cluster security group)
    "hyperpod-nodes",  # the HyperPod instance groups (VpcConfig of AWS::SageMaker::Cluster)
    "control-plane",  # EKS control-plane ENIs (cluster security group + the groups given to EKS)
    "fsx",  # FSx for Lustre file system ENIs
    "kubectl-handler",  # the kubectl provider's Lambda handler (VpcConfig)
    "gcs-store",  # the ElastiCache replication group of GCS fault tolerance (constructs/gcs_store.py)
    "ray-head-pods",  # branch interfaces of the Ray head pods (SecurityGroupPolicy, constructs/ray_heads.py)
    "amp-scraper",  # the AMP managed collector's ENIs (AWS::APS::Scraper EksConfiguration)
]


@dataclass(frozen=True)
class Part:
    name: str
    what: str
    on: Attachment


PARTS: dict[str, Part] = {
    p.name: p
    for p in (
        Part("system-nodes", "EKS managed node group 'system' (kubelet)", "system-nodes"),
        Part("coredns", "CoreDNS pods (managed add-on, system nodes)", "system-nodes"),
        Part("kuberay-operator", "KubeRay operator pod (system nodes)", "system-nodes"),
        Part(
            "ray-head", "Ray head pods of RayJob/RayService (system nodes, their own security group)", "ray-head-pods"
        ),
        Part("hyperpod-nodes", "HyperPod GPU nodes (kubelet, HyperPod agents)", "hyperpod-nodes"),
        Part("ray-workers", "Ray worker pods, Serve replicas and the LLM engines (HyperPod nodes)", "hyperpod-nodes"),
        Part("eks-api", "EKS API server (private endpoint ENIs)", "control-plane"),
        Part("fsx", "FSx for Lustre file system", "fsx"),
        Part("kubectl-handler", "kubectl/helm custom-resource handler (Lambda)", "kubectl-handler"),
        Part("gcs-store", "GCS fault-tolerance store of the RayServices (ElastiCache for Valkey)", "gcs-store"),
        Part("amp-scraper", "Amazon Managed Prometheus collector ENIs (private subnets)", "amp-scraper"),
    )
}

# ---------------------------------------------------------------------------------------------
# Ports (each from where it lives)
# ---------------------------------------------------------------------------------------------

ALL_PORTS = (0, 65535)
# KubeRay 1.7's liveness and readiness probes of a Ray container: an HTTP GET by the kubelet to
# the dashboard agent (ray-operator/controllers/ray/common/pod.go:743-749,
# utils/constant.go:109 DefaultDashboardAgentListenPort at v1.7.0).
RAY_PROBE_PORT = 52365
DNS_PORT = 53
KUBELET_PORT = 10250
HTTPS_PORT = 443
# Lustre: 988 (LNet), 1018-1023 (client reserved ports); FSx for Lustre user guide,
# "File system access control with Amazon VPC".
LUSTRE_PORTS: tuple[tuple[int, int], ...] = ((988, 988), (1018, 1023))


def ray_head_ports() -> tuple[int, ...]:
    """The head's fixed ports (GCS, dashboard, client) as the workloads declare them."""
    head = k8s.head_group("", app="")
    return tuple(p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"])


# Beyond the head's fixed ports, Ray's raylet, object manager, agents and worker processes listen
# on ports Ray chooses at start-up (random unless each is pinned in rayStartParams), and the head
# and the workers connect to each other's: Ray's "Configuring Ray: ports" guide. So Ray needs TCP
# on every port in both directions between the pools.
RAY_NODE_PORTS = ALL_PORTS

# ---------------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NetworkFlow:
    name: str
    what: str
    why: str
    source: str  # a PARTS name
    destination: str  # a PARTS name
    protocol: Protocol
    ports: tuple[int, int]
    # EFA's OS-bypass traffic needs rules that name the security group itself in both directions
    # (EC2 user guide, "Prepare an EFA-enabled security group"): a CIDR rule is not enough.
    group_rules_only: bool = False


@dataclass(frozen=True)
class EgressFlow:
    """A flow that leaves the VPC: it needs a route (NAT or gateway endpoint) or an interface endpoint."""

    name: str
    what: str
    why: str
    source: str
    service: str  # the endpoint service name suffix, e.g. "s3", "ecr.dkr"


# Principals and resources review/flows.py can find in the templates.
Principal = Literal[
    "fsx-s3-service-linked-role",
    "hyperpod-execution-role",
    "system-node-role",
    "workloads-role",
    "team-role",
    "team-member",
    "fsx-csi-role",
    "flow-log-role",
    "logs-service",
    "cloudwatch-agent-role",
    "aps-service",
    "events-service",
]
Resource = Literal[
    "platform-key",
    "flow-log-key",
    "flow-log-group",
    "s3-object",
    "s3-bucket",
    "fsx-file-system",
    "ec2",
    "ray-auth-secret",
    "ray-auth-secret-key",
    "gcs-store-secret",
    "gcs-store-secret-key",
    "container-log-group",
    "container-log-key",
    "alarm-topic",
    "alarm-topic-key",
    "ecr-repository",
]


@dataclass(frozen=True)
class AccessFlow:
    name: str
    what: str
    why: str
    principal: Principal
    actions: tuple[str, ...]
    resource: Resource
    # s3-object: "bucket/key"; s3-bucket: "bucket" with s3:prefix in context; ec2: the resource
    # types to prove for each action (those IAM's action table lists for it); ray-auth-secret and
    # ray-auth-secret-key (the key that secret names): the secret's name; container-log-group and
    # container-log-key: the log group's kind (config.observability.CONTAINER_LOG_KINDS);
    # ecr-repository: the repository's name in this account's registry.
    target: str = ""
    resource_types: tuple[str, ...] = ()
    # Request context; "{region}", "{account}", "{bucket_arn}", "{log_group_arn}", "{secret_arn}" are filled in.
    context: tuple[tuple[str, str], ...] = ()
    # workloads-role, team-role: the namespace whose Pod Identity association (its ray-workloads
    # service account) gives the pods the role; "" is the workloads' own namespace.
    namespace: str = ""
    # team-member: the team member's IAM principal (config teams[].principal_arns).
    member: str = ""
    # False: a fence. Every request of the flow must be denied; the check fails naming what allows it.
    allowed: bool = True


@dataclass(frozen=True)
class S3Location:
    """An S3 prefix a workload reads or writes, and the config field it comes from."""

    bucket: str
    prefix: str
    write: bool
    source: str


def _folder(uri: str) -> str | None:
    """The s3:// folder of an object's URI (None for anything else)."""
    if not uri.startswith("s3://"):
        return None
    return uri.rsplit("/", 1)[0] + "/" if uri.count("/") > 2 else uri


def s3_locations(config: EnvironmentConfig) -> list[S3Location]:
    """Every S3 prefix a workload reads or writes, derived from the environment config."""
    out = [
        S3Location(
            config.bucket_names()["checkpoints"], config.fsx.import_export_prefix, True, "fsx.import_export_prefix"
        )
    ]

    def add(uri: str | None, write: bool, source: str) -> None:
        if uri and uri.startswith("s3://"):
            bucket, _, key = uri.removeprefix("s3://").partition("/")
            prefix = key if not key or key.endswith("/") else key + "/"
            out.append(S3Location(bucket, prefix, write, source))

    add(config.training.storage_path, True, "training.storage_path")
    add(config.training.data_path, False, "training.data_path")
    add(config.inference.storage_path, False, "inference.storage_path")
    # A tokenizer.json is one object: its folder is read (the training job and pretokenize).
    add(_folder(config.training.tokenizer), False, "training.tokenizer")
    if config.pretokenize is not None:
        add(config.pretokenize.input, False, "pretokenize.input")
        add(_folder(config.pretokenize.tokenizer), False, "pretokenize.tokenizer")
    if config.inference.llm.enabled:
        add(config.inference.llm.model_source, False, "inference.llm.model_source")
    # The users' own data (jobs.read_locations): read only.
    for i, uri in enumerate(config.jobs.read_locations):
        add(uri, False, f"jobs.read_locations[{i}]")
    # `hpray submit job` uploads each job's working directory here; Ray pods only read it.
    out.append(S3Location(config.bucket_names()["checkpoints"], JOBS_PREFIX, False, "jobs.prefix"))
    seen: set[tuple[str, str]] = set()
    unique = []
    for loc in out:
        if (loc.bucket, loc.prefix) not in seen:
            seen.add((loc.bucket, loc.prefix))
            unique.append(loc)
    return unique


# (API group, resource, verb)
KubeRequest = tuple[str, str, str]


@dataclass(frozen=True)
class KubeFlow:
    """What a team member's EKS access entry (its access policies and the RBAC objects bound to
    its Kubernetes groups) allows in one namespace, or (``allowed`` False) must not allow."""

    name: str
    what: str
    why: str
    member: str  # IAM principal ARN of the access entry
    namespace: str
    requests: tuple[KubeRequest, ...]
    allowed: bool = True
