"""Every network and IAM/KMS flow the platform needs, as data.

The constructs that create the parts import the port facts from here (``eks_cluster.py`` joins
the two node pools with them); ``review/flows.py`` proves each flow against the synthesized
templates, in tests per environment and in ``make synth``. A flow names what it is, why it is
needed, and the parts at both ends; the parts are located in the templates by ``review/flows.py``.

Pods use their node's security groups: the VPC CNI gives pods the node's ENI groups, so a pod
part names the node pool it runs on. The exception is the Ray heads: security groups for pods
(https://docs.aws.amazon.com/eks/latest/userguide/security-groups-for-pods.html) gives them a
group of their own (constructs/ray_heads.py), so the GCS store can admit them and no other pod
of the system nodes; ``denied_flows`` lists what must stay closed.

One module because the flow table is one fact: the parts, their ports and every flow between them
are read together by the constructs and by ``review/flows.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from config import observability as obs
from config import versions
from config.jobs import JOBS_PREFIX
from config.names import (
    GCS_STORE_PORT,
    SERVE_PORT,
    gcs_store_secret_name,
    ray_auth_secret_name,
    team_ray_auth_secret_name,
)
from workloads.common import k8s
from workloads.common.network_policy import POD_FLOWS

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig
    from config.teams import Team

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
# Network flows
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


def _lustre(source: str, why: str) -> list[NetworkFlow]:
    return [
        NetworkFlow(f"{source}->fsx:{lo}-{hi}", f"Lustre {lo}-{hi} from {source}", why, source, "fsx", "tcp", (lo, hi))
        for lo, hi in LUSTRE_PORTS
    ]


def network_flows() -> list[NetworkFlow]:
    head = ray_head_ports()
    flows = [
        NetworkFlow(
            "hyperpod-dns-udp",
            "DNS (UDP 53) from HyperPod pods to CoreDNS",
            "Ray workers resolve the head's service name and AWS endpoints through CoreDNS, which runs on the system nodes.",
            "ray-workers",
            "coredns",
            "udp",
            (DNS_PORT, DNS_PORT),
        ),
        NetworkFlow(
            "hyperpod-dns-tcp",
            "DNS (TCP 53) from HyperPod pods to CoreDNS",
            "Large DNS answers fall back to TCP.",
            "ray-workers",
            "coredns",
            "tcp",
            (DNS_PORT, DNS_PORT),
        ),
        NetworkFlow(
            "system-dns-udp",
            "DNS (UDP 53) from system-node pods to CoreDNS",
            "The head and the operator resolve service names.",
            "ray-head",
            "coredns",
            "udp",
            (DNS_PORT, DNS_PORT),
        ),
        NetworkFlow(
            "head-dns-tcp",
            "DNS (TCP 53) from the Ray heads to CoreDNS",
            "Large DNS answers fall back to TCP; the heads have their own security group.",
            "ray-head",
            "coredns",
            "tcp",
            (DNS_PORT, DNS_PORT),
        ),
        NetworkFlow(
            "head->eks-api",
            "Ray heads to the EKS API (443)",
            "KubeRay's autoscaler sidecar in the head pod scales the RayCluster through the API server.",
            "ray-head",
            "eks-api",
            "tcp",
            (HTTPS_PORT, HTTPS_PORT),
        ),
        *[
            NetworkFlow(
                f"worker->head:{p}",
                f"Ray worker to the head's port {p}",
                "Workers register with the head's GCS (6379); the dashboard agent reports to 8265; clients use 10001.",
                "ray-workers",
                "ray-head",
                "tcp",
                (p, p),
            )
            for p in head
        ],
        NetworkFlow(
            "worker->head:ray",
            "Ray worker to the head's raylet, object manager and worker ports",
            "Object transfers and actor calls between the head node and the workers use ports Ray picks at start.",
            "ray-workers",
            "ray-head",
            "tcp",
            RAY_NODE_PORTS,
        ),
        NetworkFlow(
            "head->worker:ray",
            "Ray head to the workers' raylet, object manager and worker ports",
            "The head's GCS and driver call the workers' raylets and workers (health checks, task pushes, object pulls).",
            "ray-head",
            "ray-workers",
            "tcp",
            RAY_NODE_PORTS,
        ),
        NetworkFlow(
            "worker->worker:ray",
            "Ray worker to Ray worker, all TCP",
            "Object transfers and collective setup between worker pods on different HyperPod nodes.",
            "ray-workers",
            "ray-workers",
            "tcp",
            RAY_NODE_PORTS,
        ),
        # The only head port KubeRay calls here: the heads are excluded from Serve, so it sends
        # no proxy health check to 8000 (workloads/common/network_policy.py operator_ports).
        NetworkFlow(
            "operator->head:dashboard",
            "KubeRay operator to the heads' dashboard (8265)",
            "The operator submits RayJobs and reads Serve status through the head's dashboard.",
            "kuberay-operator",
            "ray-head",
            "tcp",
            (head[1], head[1]),
        ),
        NetworkFlow(
            "kubelet->head:probe",
            f"System nodes' kubelet to the heads' health endpoint ({RAY_PROBE_PORT})",
            "KubeRay's liveness and readiness probes; the heads have their own security group.",
            "system-nodes",
            "ray-head",
            "tcp",
            (RAY_PROBE_PORT, RAY_PROBE_PORT),
        ),
        NetworkFlow(
            "system->serve",
            f"In-cluster clients on the system nodes to Serve replicas ({SERVE_PORT})",
            "The RayService's serve Service routes to the workers' proxies (the heads are excluded from it).",
            "ray-head",
            "ray-workers",
            "tcp",
            (SERVE_PORT, SERVE_PORT),
        ),
        NetworkFlow(
            "control-plane->system:kubelet",
            "EKS control plane to the system nodes' kubelet (10250)",
            "kubectl logs/exec and the API server's health checks.",
            "eks-api",
            "system-nodes",
            "tcp",
            (KUBELET_PORT, KUBELET_PORT),
        ),
        NetworkFlow(
            "control-plane->hyperpod:kubelet",
            "EKS control plane to the HyperPod nodes' kubelet (10250)",
            "kubectl logs/exec on Ray worker pods.",
            "eks-api",
            "hyperpod-nodes",
            "tcp",
            (KUBELET_PORT, KUBELET_PORT),
        ),
        NetworkFlow(
            "system->eks-api",
            "System nodes to the EKS API (443)",
            "kubelet and controllers talk to the API server.",
            "system-nodes",
            "eks-api",
            "tcp",
            (HTTPS_PORT, HTTPS_PORT),
        ),
        NetworkFlow(
            "hyperpod->eks-api",
            "HyperPod nodes to the EKS API (443)",
            "kubelet on HyperPod nodes joins the cluster.",
            "hyperpod-nodes",
            "eks-api",
            "tcp",
            (HTTPS_PORT, HTTPS_PORT),
        ),
        NetworkFlow(
            "kubectl->eks-api",
            "kubectl handler to the EKS API (443)",
            "CloudFormation applies manifests and Helm charts through it.",
            "kubectl-handler",
            "eks-api",
            "tcp",
            (HTTPS_PORT, HTTPS_PORT),
        ),
        NetworkFlow(
            "hyperpod-efa",
            "NCCL over EFA between HyperPod nodes (all traffic)",
            "Collectives between GPU nodes; EFA needs all traffic within the group both ways.",
            "hyperpod-nodes",
            "hyperpod-nodes",
            "all",
            ALL_PORTS,
            group_rules_only=True,
        ),
        *metrics_flows(),
        *_lustre("ray-workers", "Workers read data and write checkpoints on /fsx."),
        *_lustre("ray-head", "The head pods mount the same FSx claim (checkpoint listing, Serve's model files)."),
        *pod_flows(),
    ]
    return flows


def gcs_store_flows(config: EnvironmentConfig) -> list[NetworkFlow]:
    """The Ray heads to the GCS store, where the environment has GCS fault tolerance."""
    if not config.gcs_fault_tolerance:
        return []
    return [
        NetworkFlow(
            "head->gcs-store",
            f"Ray heads to the GCS store (TLS {GCS_STORE_PORT})",
            "Each RayService head's GCS keeps the cluster's metadata there (gcsFaultToleranceOptions); "
            "KubeRay's Redis cleanup job, built from the head pod, deletes it when the cluster goes.",
            "ray-head",
            "gcs-store",
            "tcp",
            (GCS_STORE_PORT, GCS_STORE_PORT),
        )
    ]


def metrics_flows() -> list[NetworkFlow]:
    """The AMP managed collector (constructs/observability.py): pod discovery through the EKS API
    and scrapes of the metrics ports."""
    port = (obs.RAY_METRICS_PORT, obs.RAY_METRICS_PORT)
    return [
        NetworkFlow(
            "scraper->eks-api",
            "AMP collector to the EKS API (443)",
            "The collector discovers Ray and operator pods through the API server (kubernetes_sd_configs role pod).",
            "amp-scraper",
            "eks-api",
            "tcp",
            (obs.API_PORT, obs.API_PORT),
        ),
        NetworkFlow(
            "scraper->head:metrics",
            f"AMP collector to the Ray heads' metrics port ({port[0]})",
            "Ray Core, Train and Serve metrics of the head node (KubeRay's metrics-export-port).",
            "amp-scraper",
            "ray-head",
            "tcp",
            port,
        ),
        NetworkFlow(
            "scraper->workers:metrics",
            f"AMP collector to the Ray workers' metrics port ({port[0]})",
            "Ray Core, Train and Serve metrics of every worker node.",
            "amp-scraper",
            "ray-workers",
            "tcp",
            port,
        ),
        NetworkFlow(
            "scraper->operator:metrics",
            f"AMP collector to the KubeRay operator's metrics port ({obs.OPERATOR_METRICS_PORT})",
            "RayJob and RayService status metrics behind the RayJobFailed and RayServiceNotReady alerts.",
            "amp-scraper",
            "kuberay-operator",
            "tcp",
            (obs.OPERATOR_METRICS_PORT, obs.OPERATOR_METRICS_PORT),
        ),
    ]


def pod_flows() -> list[NetworkFlow]:
    """What the workloads' NetworkPolicies allow between parts (workloads/common/network_policy.py):
    the security groups must admit it too, or the policy's rule is void. Rows whose source is
    not a part (namespaces chosen by label, on either pool) have no place in this table."""
    return [
        NetworkFlow(
            name,
            f"NetworkPolicy: {source} -> {destination} {protocol} {lo}-{hi}",
            why,
            source,
            destination,
            protocol,  # type: ignore[arg-type]  # POD_FLOWS types it str; its rows hold "tcp"
            (lo, hi),
        )
        for name, source, destination, protocol, (lo, hi), why in POD_FLOWS
        if source in PARTS and destination in PARTS
    ]


@dataclass(frozen=True)
class EgressFlow:
    """A flow that leaves the VPC: it needs a route (NAT or gateway endpoint) or an interface endpoint."""

    name: str
    what: str
    why: str
    source: str
    service: str  # the endpoint service name suffix, e.g. "s3", "ecr.dkr"


def egress_flows(config: EnvironmentConfig) -> list[EgressFlow]:
    out = []
    for source in ("system-nodes", "hyperpod-nodes"):
        if config.eks.ray_token_auth:
            out.append(
                EgressFlow(
                    f"{source}->secretsmanager",
                    f"{source} to Secrets Manager",
                    "The Secrets Store CSI driver's AWS provider on each node fetches the Ray token for the pods that mount it.",
                    source,
                    "secretsmanager",
                )
            )
        out += [
            EgressFlow(
                f"{source}->s3",
                f"{source} to S3",
                "Image layers (ECR stores them in S3), lifecycle scripts, checkpoints.",
                source,
                "s3",
            ),
            EgressFlow(
                f"{source}->ecr", f"{source} to ECR", "Image pulls for add-ons, agents and Ray.", source, "ecr.dkr"
            ),
            EgressFlow(
                f"{source}->ecr-api",
                f"{source} to the ECR API",
                "The kubelet's registry token (GetAuthorizationToken) and, where network.images_from_ecr is on, the "
                "first pull of an image through a pull-through cache rule.",
                source,
                "ecr.api",
            ),
            EgressFlow(
                f"{source}->sts", f"{source} to STS", "Pod Identity and IRSA credential exchange.", source, "sts"
            ),
            EgressFlow(
                f"{source}->eks-auth",
                f"{source} to EKS Auth",
                "The Pod Identity agent exchanges tokens.",
                source,
                "eks-auth",
            ),
        ]
    # Internet egress through NAT, in every environment (network.aws_interface_endpoints does not
    # close it): no interface endpoint serves these, so the review proves a NAT route.
    out += [
        EgressFlow(
            "system-nodes->internet",
            "system subnets to the internet (NAT)",
            "The kubectl handler (in these subnets) fetches Helm charts from their public repositories; the system nodes pull the KubeRay operator image from quay.io.",
            "system-nodes",
            "internet",
        ),
        EgressFlow(
            "hyperpod-nodes->internet",
            "HyperPod nodes to the internet (NAT)",
            (
                "HyperPod's own node setup; with network.images_from_ecr off, the NVIDIA device plugin image "
                "from nvcr.io (with it on, that image is a CDK asset in this account's ECR)."
            ),
            "hyperpod-nodes",
            "internet",
        ),
    ]
    out.append(
        EgressFlow(
            "hyperpod-nodes->sagemaker",
            "HyperPod nodes to the SageMaker API",
            "HyperPod's agents report node health.",
            "hyperpod-nodes",
            "sagemaker.api",
        )
    )
    return out


# ---------------------------------------------------------------------------------------------
# IAM / KMS flows
# ---------------------------------------------------------------------------------------------

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
    if config.inference.llm.enabled:
        add(config.inference.llm.model_source, False, "inference.llm.model_source")
    # `hpray submit job` uploads each job's working directory here; Ray pods only read it.
    out.append(S3Location(config.bucket_names()["checkpoints"], JOBS_PREFIX, False, "jobs.prefix"))
    seen: set[tuple[str, str]] = set()
    unique = []
    for loc in out:
        if (loc.bucket, loc.prefix) not in seen:
            seen.add((loc.bucket, loc.prefix))
            unique.append(loc)
    return unique


# The VPC CNI's ENI calls on HyperPod nodes (granted in constructs/hyperpod_cluster.py) and the
# resource types they touch there; IAM's action table says which of them each action authorizes.
ENI_ACTIONS = (
    "ec2:AssignPrivateIpAddresses",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DetachNetworkInterface",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:UnassignPrivateIpAddresses",
)
CNI_RESOURCE_TYPES = ("network-interface", "subnet", "security-group", "instance")


def access_flows(
    config: EnvironmentConfig, *, eni_actions: tuple[str, ...] = ("ec2:CreateNetworkInterface", *ENI_ACTIONS)
) -> list[AccessFlow]:
    s3_via = (
        ("kms:ViaService", "s3.{region}.amazonaws.com"),
        ("kms:CallerAccount", "{account}"),
        ("aws:SecureTransport", "true"),
    )
    flows = [
        AccessFlow(
            "fsx-slr-platform-key",
            "FSx's S3 service-linked role uses the platform key through S3",
            "The data repository association imports and exports checkpoints in the SSE-KMS bucket "
            "(FSx for Lustre user guide, 'Working with server-side encrypted Amazon S3 buckets').",
            "fsx-s3-service-linked-role",
            ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncryptFrom", "kms:DescribeKey"),
            "platform-key",
            # Bucket keys on: the encryption context is the bucket ARN (same guide).
            context=(*s3_via, ("kms:EncryptionContext:aws:s3:arn", "{bucket_arn}")),
            target=config.bucket_names()["checkpoints"],
        ),
        AccessFlow(
            "execution-role-ebs-grant",
            "HyperPod execution role creates grants on the platform key",
            "HyperPod encrypts node EBS volumes with the platform key; scale-out, node replacement and "
            "software updates create grants (SageMaker guide, 'Customer managed AWS KMS key encryption for SageMaker HyperPod').",
            "hyperpod-execution-role",
            ("kms:CreateGrant", "kms:DescribeKey"),
            "platform-key",
            context=(
                ("kms:GrantIsForAWSResource", "true"),
                ("kms:ViaService", "sagemaker.{region}.amazonaws.com"),
                ("kms:CallerAccount", "{account}"),
            ),
        ),
        AccessFlow(
            "execution-role-scripts",
            "HyperPod execution role reads the lifecycle scripts",
            "Nodes run on_create.sh from the scripts bucket at boot.",
            "hyperpod-execution-role",
            ("kms:Decrypt",),
            "platform-key",
            context=s3_via,
        ),
        AccessFlow(
            "csi-describe-fsx",
            "FSx CSI controller describes file systems",
            "The controller validates the static volume's file system.",
            "fsx-csi-role",
            ("fsx:DescribeFileSystems",),
            "fsx-file-system",
        ),
        AccessFlow(
            "flow-logs-write",
            "VPC Flow Logs writes to its log group",
            "Flow logs of every ENI in the VPC.",
            "flow-log-role",
            ("logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"),
            "flow-log-group",
        ),
        AccessFlow(
            "logs-flow-log-key",
            "CloudWatch Logs encrypts the flow log group with its key",
            "The log group is KMS-encrypted (CloudWatch Logs guide, 'Encrypt log data using AWS KMS').",
            "logs-service",
            ("kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey"),
            "flow-log-key",
            context=(("kms:EncryptionContext:aws:logs:arn", "{log_group_arn}"),),
        ),
    ]
    # Ray token authentication: the Secrets Store CSI driver's AWS provider reads the token with
    # the pods' Pod Identity role (constructs/ray_auth.py); Secrets Manager decrypts it with the
    # secret's key on the caller's behalf, the secret's ARN as encryption context (KMS developer
    # guide, "How AWS Secrets Manager uses AWS KMS").
    secret = ray_auth_secret_name(config.name_prefix)
    flows += [
        AccessFlow(
            "workloads-ray-auth-secret",
            "Ray pods read the Ray auth token",
            "Every Ray pod mounts the token's CSI volume; KubeRay's authOptions names the Secret it syncs.",
            "workloads-role",
            ("secretsmanager:GetSecretValue",),
            "ray-auth-secret",
            target=secret,
            context=(("aws:SecureTransport", "true"),),
        ),
        AccessFlow(
            "workloads-ray-auth-key",
            "Ray pods decrypt the Ray auth token through Secrets Manager",
            "The secret is encrypted with the platform key.",
            "workloads-role",
            ("kms:Decrypt",),
            "ray-auth-secret-key",
            target=secret,
            context=(
                ("kms:ViaService", "secretsmanager.{region}.amazonaws.com"),
                ("kms:CallerAccount", "{account}"),
                ("kms:EncryptionContext:SecretARN", "{secret_arn}"),
            ),
        ),
    ]
    if config.gcs_fault_tolerance:
        # The GCS store's AUTH token reaches the heads the same way (constructs/gcs_store.py).
        gcs_secret = gcs_store_secret_name(config.name_prefix)
        flows += [
            AccessFlow(
                "workloads-gcs-store-secret",
                "Ray heads read the GCS store's AUTH token",
                "The head mounts the store's CSI volume; gcsFaultToleranceOptions.redisPassword names the Secret it syncs.",
                "workloads-role",
                ("secretsmanager:GetSecretValue",),
                "gcs-store-secret",
                target=gcs_secret,
                context=(("aws:SecureTransport", "true"),),
            ),
            AccessFlow(
                "workloads-gcs-store-key",
                "Ray heads decrypt the GCS store's AUTH token through Secrets Manager",
                "The secret is encrypted with the platform key.",
                "workloads-role",
                ("kms:Decrypt",),
                "gcs-store-secret-key",
                target=gcs_secret,
                context=(
                    ("kms:ViaService", "secretsmanager.{region}.amazonaws.com"),
                    ("kms:CallerAccount", "{account}"),
                    ("kms:EncryptionContext:SecretARN", "{secret_arn}"),
                ),
            ),
        ]
    flows += observability_access_flows()
    flows += image_pull_flows(config)
    flows += team_access_flows(config)
    flows += asset_pull_flows(config)
    for action in eni_actions:
        flows.append(
            AccessFlow(
                f"cni-{action.split(':')[1]}",
                f"VPC CNI on HyperPod nodes: {action}",
                "The VPC CNI manages ENIs and secondary IPs for pods in the HyperPod subnets.",
                "hyperpod-execution-role",
                (action,),
                "ec2",
                resource_types=CNI_RESOURCE_TYPES,
            )
        )
    for loc in s3_locations(config):
        actions = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject") if loc.write else ("s3:GetObject",)
        flows.append(
            AccessFlow(
                f"workloads-s3:{loc.bucket}/{loc.prefix}",
                f"Ray workloads {'read and write' if loc.write else 'read'} s3://{loc.bucket}/{loc.prefix}",
                f"From config {loc.source}.",
                "workloads-role",
                actions,
                "s3-object",
                target=f"{loc.bucket}/{loc.prefix}flows-probe",
                context=(("aws:SecureTransport", "true"),),
            )
        )
        flows.append(
            AccessFlow(
                f"workloads-list:{loc.bucket}/{loc.prefix}",
                f"Ray workloads list s3://{loc.bucket}/{loc.prefix}",
                f"From config {loc.source}: Ray Train and the model loaders list the prefix.",
                "workloads-role",
                ("s3:ListBucket",),
                "s3-bucket",
                target=loc.bucket,
                context=(("s3:prefix", loc.prefix), ("aws:SecureTransport", "true")),
            )
        )
        if loc.bucket == config.bucket_names()["checkpoints"]:
            kms_actions = ("kms:Decrypt", "kms:GenerateDataKey") if loc.write else ("kms:Decrypt",)
            flows.append(
                AccessFlow(
                    f"workloads-key:{loc.bucket}/{loc.prefix}",
                    f"Ray workloads use the platform key for s3://{loc.bucket}/{loc.prefix}",
                    "The checkpoint bucket is SSE-KMS with the platform key.",
                    "workloads-role",
                    kms_actions,
                    "platform-key",
                    context=(*s3_via, ("kms:EncryptionContext:aws:s3:arn", "{bucket_arn}")),
                    target=loc.bucket,
                )
            )
    return flows


def _team_role_flow(
    team: Team, name: str, what: str, why: str, actions: tuple[str, ...], resource: Resource, **kw: Any
) -> list[AccessFlow]:
    """A flow of the role that team ``team``'s namespace gives its Ray pods."""
    flow = AccessFlow(
        f"team-{team.name}-{name}",
        f"Team {team.name}'s Ray pods: {what}",
        why,
        "team-role",
        actions,
        resource,
        namespace=team.resolved_namespace,
        **kw,
    )
    return [flow]


def team_access_flows(config: EnvironmentConfig) -> list[AccessFlow]:
    """Each team (config teams, constructs/team_access.py): what its pods' role (the Pod Identity
    association of its namespace) and its members may do, and the fences around it: no read or
    write of another team's prefix, no write of the platform's prefixes, no read of another
    team's or the platform's Ray token. A member's fences are proven against an identity policy
    that allows everything: the platform does not own the members' roles, so only the resource
    policies of the templates may stand between them and another team's token."""
    checkpoints = config.bucket_names()["checkpoints"]
    s3_via = (
        ("kms:ViaService", "s3.{region}.amazonaws.com"),
        ("kms:CallerAccount", "{account}"),
        ("aws:SecureTransport", "true"),
    )
    secret_via = (
        ("kms:ViaService", "secretsmanager.{region}.amazonaws.com"),
        ("kms:CallerAccount", "{account}"),
        ("kms:EncryptionContext:SecretARN", "{secret_arn}"),
    )
    tls = (("aws:SecureTransport", "true"),)
    platform_secret = ray_auth_secret_name(config.name_prefix)
    platform_prefixes = sorted({loc.prefix for loc in s3_locations(config) if loc.bucket == checkpoints})
    flows: list[AccessFlow] = []
    for team in config.teams:
        ns, t, prefix = team.resolved_namespace, team.name, team.s3_prefix
        others = [o for o in config.teams if o is not team]
        secret = team_ray_auth_secret_name(config.name_prefix, t)

        flows += _team_role_flow(
            team,
            "s3",
            f"read and write s3://{checkpoints}/{prefix}",
            f"Their checkpoints and the code `hpray submit job -n {ns}` uploads live under the team's prefix.",
            ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"),
            "s3-object",
            target=f"{checkpoints}/{prefix}flows-probe",
            context=tls,
        )
        flows += _team_role_flow(
            team,
            "s3-list",
            f"list s3://{checkpoints}/{prefix}",
            "Ray Train lists its checkpoints.",
            ("s3:ListBucket",),
            "s3-bucket",
            target=checkpoints,
            context=(("s3:prefix", prefix), *tls),
        )
        flows += _team_role_flow(
            team,
            "s3-key",
            "use the platform key for their prefix",
            "The checkpoint bucket is SSE-KMS with the platform key.",
            ("kms:Decrypt", "kms:GenerateDataKey"),
            "platform-key",
            target=checkpoints,
            context=(*s3_via, ("kms:EncryptionContext:aws:s3:arn", "{bucket_arn}")),
        )
        for other in others:
            flows += _team_role_flow(
                team,
                f"fence-s3:{other.name}",
                f"no read or write of team {other.name}'s prefix",
                "Teams do not see or overwrite each other's checkpoints.",
                ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"),
                "s3-object",
                target=f"{checkpoints}/{other.s3_prefix}flows-probe",
                context=tls,
                allowed=False,
            )
        for p in platform_prefixes:
            flows += _team_role_flow(
                team,
                f"fence-s3:{p}",
                f"no write of the platform's s3://{checkpoints}/{p}",
                "Production checkpoints and the platform's job code are not the team's to overwrite.",
                ("s3:PutObject", "s3:DeleteObject"),
                "s3-object",
                target=f"{checkpoints}/{p}flows-probe",
                context=tls,
                allowed=False,
            )
        if not config.eks.ray_token_auth:
            continue
        flows += _team_role_flow(
            team,
            "ray-token",
            "read the team's Ray token",
            "Every Ray pod of the namespace mounts the team's SecretProviderClass, which syncs it.",
            ("secretsmanager:GetSecretValue",),
            "ray-auth-secret",
            target=secret,
            context=tls,
        )
        flows += _team_role_flow(
            team,
            "ray-token-key",
            "decrypt the team's Ray token through Secrets Manager",
            "The secret is encrypted with the platform key.",
            ("kms:Decrypt",),
            "ray-auth-secret-key",
            target=secret,
            context=secret_via,
        )
        fenced: list[tuple[str, Resource, str]] = [
            (o.name, "ray-auth-secret", team_ray_auth_secret_name(config.name_prefix, o.name)) for o in others
        ]
        fenced.append(("platform", "ray-auth-secret", platform_secret))
        if config.gcs_fault_tolerance:
            fenced.append(("gcs-store", "gcs-store-secret", gcs_store_secret_name(config.name_prefix)))
        for whose, kind, other_secret in fenced:
            flows += _team_role_flow(
                team,
                f"fence-token:{whose}",
                f"no read of team {whose}'s Ray token"
                if kind == "ray-auth-secret" and whose != "platform"
                else f"no read of the {whose} token",
                "A token opens every Ray cluster (or store) that uses it: the platform's services included.",
                ("secretsmanager:GetSecretValue",),
                kind,
                target=other_secret,
                context=tls,
                allowed=False,
            )
        for i, member in enumerate(team.principal_arns):
            flows += [
                AccessFlow(
                    f"team-{t}-member{i}-ray-token",
                    f"Team {t}'s member {member} reads the team's Ray token",
                    f"`hpray logs` and `hpray dashboard -n {ns}` call the team's Ray heads with it.",
                    "team-member",
                    ("secretsmanager:GetSecretValue",),
                    "ray-auth-secret",
                    target=secret,
                    context=tls,
                    member=member,
                ),
                AccessFlow(
                    f"team-{t}-member{i}-ray-token-key",
                    f"Team {t}'s member {member} decrypts the team's Ray token through Secrets Manager",
                    "The platform key's policy names the team's members for that secret only.",
                    "team-member",
                    ("kms:Decrypt",),
                    "ray-auth-secret-key",
                    target=secret,
                    context=secret_via,
                    member=member,
                ),
            ]
            for whose, kind, other_secret in fenced:
                flows.append(
                    AccessFlow(
                        f"team-{t}-member{i}-fence-token:{whose}",
                        f"Team {t}'s member {member}: no read of the {whose} token, whatever its own IAM policies allow",
                        "An explicit deny in the secret's resource policy.",
                        "team-member",
                        ("secretsmanager:GetSecretValue",),
                        kind,
                        target=other_secret,
                        context=tls,
                        member=member,
                        allowed=False,
                    )
                )
    return flows


def image_pull_flows(config: EnvironmentConfig) -> list[AccessFlow]:
    """With network.images_from_ecr, the node roles that pull an image through a pull-through
    cache rule (constructs/image_cache.py) may import it: the KubeRay operator on the system
    nodes, and the Serve LLM image on the system nodes (its head) and the HyperPod nodes (its
    GPU workers)."""
    if not config.network.images_from_ecr:
        return []
    pulls: list[tuple[Principal, str, str]] = [
        ("system-node-role", versions.KUBERAY_OPERATOR_IMAGE, "the KubeRay operator")
    ]
    if config.inference.llm.enabled:
        pulls += [
            ("system-node-role", k8s.RAY_LLM_IMAGE, "the Serve LLM service's head"),
            ("hyperpod-execution-role", k8s.RAY_LLM_IMAGE, "the Serve LLM service's GPU workers"),
        ]
    flows = []
    for principal, image, who in pulls:
        repository = versions.pull_through_repository(image)
        flows.append(
            AccessFlow(
                f"pull-through:{principal}:{repository}",
                f"{principal} imports {image} ({who}) through the pull-through cache",
                "The first pull of an image through a rule, and a pull after the cache's daily check of "
                "the upstream tag, creates the repository and imports the image as the puller (ECR user "
                "guide, 'IAM permissions required to sync an upstream registry').",
                principal,
                ("ecr:BatchImportUpstreamImage", "ecr:CreateRepository"),
                "ecr-repository",
                target=repository,
            )
        )
    return flows


def asset_pull_flows(config: EnvironmentConfig) -> list[AccessFlow]:
    """The HyperPod nodes pull the CDK image assets from the CDK assets repository (review/images.py
    lists them): the workloads image (the Ray workers), and with network.images_from_ecr the NVIDIA
    device plugin, which nothing else puts in ECR."""
    from workloads.common import image

    images = ["the workloads image (Ray workers)"]
    if config.network.images_from_ecr and config.gpu_device_plugin_instance_types():
        images.append("the NVIDIA device plugin")
    return [
        AccessFlow(
            "asset-pull:hyperpod-execution-role",
            "hyperpod-execution-role pulls the CDK image assets: " + ", ".join(images),
            "`cdk deploy` publishes them into the CDK assets repository before the cluster stack; the "
            "kubelet of a HyperPod node pulls them with the node's execution role.",
            "hyperpod-execution-role",
            ("ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"),
            "ecr-repository",
            target=image.repository_name(config.account, config.region),
        )
    ]


def observability_access_flows() -> list[AccessFlow]:
    """Container logs (the add-on's Fluent Bit and agent) and alarms (AMP's alert manager and
    EventBridge to the SNS topic), constructs/observability.py."""
    flows = []
    for kind in obs.CONTAINER_LOG_KINDS:
        flows += [
            AccessFlow(
                f"cloudwatch-agent-logs:{kind}",
                f"CloudWatch Observability add-on writes the {kind} log group",
                "Fluent Bit (container and node logs) and the agent (performance events) run as the add-on's service account.",
                "cloudwatch-agent-role",
                obs.CONTAINER_LOG_WRITER_ACTIONS,
                "container-log-group",
                target=kind,
            ),
            AccessFlow(
                f"logs-container-key:{kind}",
                f"CloudWatch Logs encrypts the {kind} log group with the platform key",
                "Container logs are KMS-encrypted (CloudWatch Logs guide, 'Encrypt log data using AWS KMS').",
                "logs-service",
                ("kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey"),
                "container-log-key",
                target=kind,
                context=(("kms:EncryptionContext:aws:logs:arn", "{log_group_arn}"),),
            ),
        ]
    publishers: tuple[tuple[Principal, str], ...] = (
        ("aps-service", "AMP's alert manager sends the alerting rules' notifications (sns_configs)."),
        ("events-service", "EventBridge forwards HyperPod's error-level cluster events."),
    )
    for principal, why in publishers:
        flows += [
            AccessFlow(
                f"{principal}-alarm-topic",
                f"{principal} publishes to the alarm topic",
                why,
                principal,
                ("sns:Publish",),
                "alarm-topic",
                context=(("aws:SourceAccount", "{account}"),),
            ),
            AccessFlow(
                f"{principal}-alarm-topic-key",
                f"{principal} encrypts messages with the alarm topic's key",
                "The topic is KMS-encrypted; SNS asks KMS on the publisher's behalf.",
                principal,
                ("kms:GenerateDataKey", "kms:Decrypt"),
                "alarm-topic-key",
                context=(("aws:SourceAccount", "{account}"), ("kms:ViaService", "sns.{region}.amazonaws.com")),
            ),
        ]
    return flows


# ---------------------------------------------------------------------------------------------
# Kubernetes RBAC flows
# ---------------------------------------------------------------------------------------------

# (API group, resource, verb)
KubeRequest = tuple[str, str, str]
# What a team member must never do in the team's namespace: read the synced Ray token (a Secret),
# run a pod of their own (it could name any service account of the namespace, the one with the
# team's Pod Identity role included) or exec into one, mint a service account token, impersonate
# an account, or grant themselves more.
TEAM_FENCES: tuple[tuple[str, KubeRequest], ...] = (
    ("secrets-get", ("", "secrets", "get")),
    ("secrets-list", ("", "secrets", "list")),
    ("secrets-watch", ("", "secrets", "watch")),
    ("pods-create", ("", "pods", "create")),
    ("pods-exec", ("", "pods/exec", "create")),
    ("serviceaccount-token", ("", "serviceaccounts/token", "create")),
    ("serviceaccount-impersonate", ("", "serviceaccounts", "impersonate")),
    ("rolebindings-create", ("rbac.authorization.k8s.io", "rolebindings", "create")),
)
# What a team member must never do in another team's namespace or the platform's.
FOREIGN_FENCES: tuple[tuple[str, KubeRequest], ...] = (
    ("rayjobs-list", ("ray.io", "rayjobs", "list")),
    ("rayjobs-create", ("ray.io", "rayjobs", "create")),
    ("portforward", ("", "pods/portforward", "create")),
)


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


def kube_flows(config: EnvironmentConfig) -> list[KubeFlow]:
    """Per team member: the job commands work in the team's namespace with what the access
    entry gives (``ops.permissions.K8S_JOB_COMMANDS``), and the fences hold there and elsewhere."""
    from ops.permissions import K8S_JOB_COMMANDS

    flows = []
    namespaces = [k8s.NAMESPACE, *(t.resolved_namespace for t in config.teams)]
    for team in config.teams:
        ns = team.resolved_namespace
        for i, member in enumerate(team.principal_arns):
            base = f"team-{team.name}-member{i}-k8s"
            flows += [
                KubeFlow(
                    f"{base}:{command}",
                    f"`hpray {command} -n {ns}` as team {team.name}'s member {member}",
                    "The job commands act in the team's namespace only.",
                    member,
                    ns,
                    needs,
                )
                for command, needs in K8S_JOB_COMMANDS.items()
            ]
            flows += [
                KubeFlow(
                    f"{base}:fence-{name}",
                    f"team {team.name}'s member {member}: never {verb} {resource} in {ns}",
                    "The namespace holds the team's Ray token and the service account with its Pod Identity role.",
                    member,
                    ns,
                    ((group, resource, verb),),
                    allowed=False,
                )
                for name, (group, resource, verb) in TEAM_FENCES
            ]
            flows += [
                KubeFlow(
                    f"{base}:fence-{other}:{name}",
                    f"team {team.name}'s member {member}: never {verb} {resource} in {other}",
                    "Another team's or the platform's workloads are not the team's.",
                    member,
                    other,
                    ((group, resource, verb),),
                    allowed=False,
                )
                for other in namespaces
                if other != ns
                for name, (group, resource, verb) in FOREIGN_FENCES
            ]
    return flows


@dataclass(frozen=True)
class FlowTable:
    network: list[NetworkFlow] = field(default_factory=list)
    egress: list[EgressFlow] = field(default_factory=list)
    access: list[AccessFlow] = field(default_factory=list)
    kube: list[KubeFlow] = field(default_factory=list)
    # Network flows that the security groups must refuse.
    denied: list[NetworkFlow] = field(default_factory=list)


def denied_flows(config: EnvironmentConfig) -> list[NetworkFlow]:
    """What must not be allowed: the GCS store holds every RayService's cluster metadata, and its
    AUTH token is the only other fence, so only the heads' own group reaches it. The other pods
    of the system nodes (the KubeRay operator and CoreDNS stand for them: they share the nodes'
    group) and the control plane's interfaces do not."""
    if not config.gcs_fault_tolerance:
        return []
    return [
        NetworkFlow(
            f"{source}-x->gcs-store",
            f"{source} to the GCS store (TLS {GCS_STORE_PORT}) is refused",
            "Only the Ray heads and KubeRay's cleanup Job (their own group) reach the store.",
            source,
            "gcs-store",
            "tcp",
            (GCS_STORE_PORT, GCS_STORE_PORT),
        )
        for source in ("kuberay-operator", "coredns", "eks-api", "ray-workers")
    ]


def flow_table(config: EnvironmentConfig) -> FlowTable:
    return FlowTable(
        network_flows() + gcs_store_flows(config),
        egress_flows(config),
        access_flows(config),
        kube_flows(config),
        denied_flows(config),
    )
