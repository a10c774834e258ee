"""The network rows of the flow table: security-group flows between the parts, the flows that
leave the VPC, and the flows the security groups must refuse (constructs/flows.py has the parts,
the ports and the row types)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from config import observability as obs
from config.facts.names import GCS_STORE_PORT, SERVE_PORT
from constructs.flows import (
    ALL_PORTS,
    DNS_PORT,
    HTTPS_PORT,
    KUBELET_PORT,
    LUSTRE_PORTS,
    PARTS,
    RAY_NODE_PORTS,
    RAY_PROBE_PORT,
    EgressFlow,
    NetworkFlow,
    ray_head_ports,
)
from manifests.network_policy import POD_FLOWS

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig


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
        # no proxy health check to 8000 (manifests/network_policy.py operator_ports).
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
    """What the workloads' NetworkPolicies allow between parts (manifests/network_policy.py):
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
