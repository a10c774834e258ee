"""The Ray heads' own security group, given to the head pods by EKS security groups for pods.

Without it the heads share the security group of the ``system`` nodes (the EKS cluster security
group) with every other pod there, and with the control plane's interfaces: whatever admits the
heads admits them all. With it, a ``SecurityGroupPolicy`` (vpcresources.k8s.aws/v1beta1, served by
EKS's VPC resource controller) gives each pod of the Ray namespace labelled
``ray.io/node-type`` ``head`` or ``redis-cleanup`` a branch network interface that carries only
``security_group`` (EKS user guide, "Assign security groups to individual Pods"). KubeRay 1.7
labels the head pods ``head`` and the GCS store's cleanup Job, built from the head pod, ``redis-cleanup``
(ray-operator/controllers/ray/raycluster_controller.go:1812 at v1.7.0); both reach the GCS store.

What it needs elsewhere:
- the vpc-cni add-on with ``ENABLE_POD_ENI`` (constructs/eks_cluster.py ``VPC_CNI_CONFIGURATION``),
  in ``standard`` enforcing mode: in ``strict`` mode a pod with its own group cannot reach the EKS
  Pod Identity agent on the node, which the heads need for S3 and the Secrets Store CSI driver;
- the cluster role with ``AmazonEKSVPCResourceController`` (it manages the trunk interfaces);
- ``system`` nodes of a trunking instance type (most Nitro types, no ``t`` type): the trunk takes
  one of the node's interfaces from the ordinary pods (sizing/placement.py counts it) and every
  head pod one branch interface (the type's limit is in the VPC resource controller's
  pkg/aws/vpc/limits.go: 18 on m7i.xlarge, 38 on m7i.2xlarge; the placement check does not
  count them).

The group's rules are the head rows of the flow table (constructs/network_flows.py); the flow checks
(review/flows.py) find the group through the SecurityGroupPolicy and prove each row, and that a
pod of the system nodes without the group does not reach the GCS store.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_ec2 as ec2
from constructs import Construct, IConstruct
from constructs import flows as F

from config.facts.names import RAY_HEADS_SECURITY_GROUP_DESCRIPTION, WORKLOADS_NAMESPACE
from constructs.eks_cluster import PlatformEksCluster
from constructs.network import ingress_rules

SECURITY_GROUP_POLICY = "ray-heads"
# KubeRay's ray.io/node-type of the head pods and of the GCS store's cleanup Job.
HEAD_NODE_TYPES = ("head", "redis-cleanup")


def security_group_policy_manifest(group_id: str, namespace: str = WORKLOADS_NAMESPACE) -> dict[str, Any]:
    """The SecurityGroupPolicy that gives the Ray namespace's head pods ``group_id`` alone."""
    return {
        "apiVersion": "vpcresources.k8s.aws/v1beta1",
        "kind": "SecurityGroupPolicy",
        "metadata": {
            "name": SECURITY_GROUP_POLICY,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "hyperpod-ray", "app.kubernetes.io/component": "ray-heads"},
        },
        "spec": {
            "podSelector": {
                "matchExpressions": [{"key": "ray.io/node-type", "operator": "In", "values": list(HEAD_NODE_TYPES)}]
            },
            "securityGroups": {"groupIds": [group_id]},
        },
    }


class RayHeadSecurity(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        cluster: PlatformEksCluster,
        shared_security_group: ec2.ISecurityGroup,
        namespace: IConstruct,
    ) -> None:
        """``shared_security_group``: the HyperPod nodes', FSx's and the control plane's group;
        ``namespace``: the manifest creating the Ray namespace."""
        super().__init__(scope, construct_id)
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=RAY_HEADS_SECURITY_GROUP_DESCRIPTION,
            # As the nodes: AWS APIs through endpoints or NAT, the workers, DNS, the EKS API.
            allow_all_outbound=True,
        )
        heads = self.security_group.security_group_id
        cluster_group = cluster.cluster_security_group_id
        shared = shared_security_group.security_group_id
        all_tcp = F.RAY_NODE_PORTS
        dns = (F.DNS_PORT, F.DNS_PORT)
        dashboard = (F.ray_head_ports()[1],) * 2
        specs = [
            # group, peer, protocol, ports, description
            (
                "HeadsFromHyperPod",
                heads,
                shared,
                "tcp",
                all_tcp,
                "Ray workers to the heads (GCS, raylet, ports Ray picks)",
            ),
            ("HeadsFromOperator", heads, cluster_group, "tcp", dashboard, "KubeRay operator to the heads' dashboard"),
            # The kubelet (the node's address, in the nodes' group) probes the head over HTTP.
            (
                "HeadsFromKubelet",
                heads,
                cluster_group,
                "tcp",
                (F.RAY_PROBE_PORT,) * 2,
                "kubelet probes of the Ray heads",
            ),
            # The control plane's interfaces carry the shared group too: this rule admits the
            # heads to the EKS API (the autoscaler) as well.
            ("HyperPodFromHeads", shared, heads, "tcp", all_tcp, "Ray heads to the workers, Lustre and the EKS API"),
            ("SystemFromHeadsDnsUdp", cluster_group, heads, "udp", dns, "DNS from the Ray heads to CoreDNS"),
            ("SystemFromHeadsDnsTcp", cluster_group, heads, "tcp", dns, "DNS over TCP from the Ray heads to CoreDNS"),
        ]
        self.rules = ingress_rules(self, specs)
        self.policy = cluster.manifest(self, "SecurityGroupPolicy", [security_group_policy_manifest(heads)])
        # The policy takes effect on pods created after it, and needs the CNI that enforces it.
        cluster.requires(self.policy, "vpc-cni", nodes=True, after=[namespace])

    def admit_scraper(self, scraper_security_group: ec2.ISecurityGroup, port: int) -> None:
        """The managed Prometheus collector to the heads' metrics ``port`` (both sides: the
        collector's group allows no other egress)."""
        heads = self.security_group.security_group_id
        scraper = scraper_security_group.security_group_id
        description = "AMP collector to the Ray heads (metrics)"
        ec2.CfnSecurityGroupEgress(
            self,
            "ScraperToHeads",
            group_id=scraper,
            destination_security_group_id=heads,
            ip_protocol="tcp",
            from_port=port,
            to_port=port,
            description=description,
        )
        self.rules.append(
            ec2.CfnSecurityGroupIngress(
                self,
                "HeadsFromScraper",
                group_id=heads,
                source_security_group_id=scraper,
                ip_protocol="tcp",
                from_port=port,
                to_port=port,
                description=description,
            )
        )
