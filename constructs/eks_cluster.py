"""The EKS control plane (``aws_eks_v2``, native ``AWS::EKS::Cluster``) that HyperPod attaches to:
private endpoint, all control-plane logs, secrets encrypted with the platform key, the managed
node group ``system``, managed add-ons pinned in ``config/versions.py``, and access entries.

Not Auto Mode: the cluster's own compute is the ``system`` node group; HyperPod nodes are the GPU
compute. HyperPod's execution role gets no access entry here: HyperPod creates that entry itself
when the HyperPod cluster is created (see ``constructs/hyperpod_cluster.py`` and README
"EKS cluster").

One module because it is one construct: the control plane, its node group, add-ons and access
entries reference one another and share one lifecycle.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from typing import Any

from aws_cdk import Annotations, ArnFormat, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct, IConstruct
from constructs import flows as F

from config import versions
from config.eks import Eks
from config.facts import addons as addons_config
from config.facts.names import SYSTEM_NODEGROUP
from constructs.compliance import acknowledge, checkov_skip
from constructs.network import ingress_rules

CONTROL_PLANE_LOGS = (
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
)

# The FSx CSI driver's controller service account (the add-on's own name for it).
FSX_CSI_CONTROLLER_SA = "fsx-csi-controller-sa"
CLOUDWATCH_AGENT_SA = "cloudwatch-agent"
# The Secrets Store CSI driver add-on with its AWS provider: it installs the SecretProviderClass CRD.
SECRETS_STORE_DRIVER = "aws-secrets-store-csi-driver-provider"
# The vpc-cni add-on's configuration values (its schema: `aws eks describe-addon-configuration`).
# Security groups for pods give the Ray heads their own group (constructs/ray_heads.py):
# ENABLE_POD_ENI, in standard mode (strict mode cuts a pod with its own group off the Pod
# Identity agent on its node); the init container's DISABLE_TCP_EARLY_DEMUX lets the kubelet's
# TCP probes reach such a pod (EKS user guide, "Configure the Amazon VPC CNI plugin for
# Kubernetes for security groups for Amazon EKS Pods").
VPC_CNI_CONFIGURATION = {
    "enableNetworkPolicy": "true",
    "env": {"ENABLE_POD_ENI": "true", "POD_SECURITY_GROUP_ENFORCING_MODE": "standard"},
    "init": {"env": {"DISABLE_TCP_EARLY_DEMUX": "true"}},
}


def kubectl_layer(scope: Construct, kubernetes_version: str) -> lambda_.ILayerVersion:
    """The kubectl/helm layer pinned for this Kubernetes version (config/versions.py)."""
    module_name, class_name = versions.KUBECTL_LAYERS[kubernetes_version]
    layer_class = getattr(importlib.import_module(module_name), class_name)
    layer: lambda_.ILayerVersion = layer_class(scope, "KubectlLayer")
    return layer


def pod_identity_role(scope: Construct, construct_id: str, *, description: str) -> iam.Role:
    """A role that EKS Pod Identity can hand to a service account (pods.eks.amazonaws.com)."""
    return iam.Role(
        scope,
        construct_id,
        assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")),
        description=description,
    )


class PlatformEksCluster(Construct):
    """EKS cluster, ``system`` node group, managed add-ons, admin access entries.

    It orders what is installed on it: :meth:`install` puts a chart or manifest after the nodes
    and every add-on, :meth:`requires` after the add-ons it names.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        eks_config: Eks,
        cluster_name: str,
        vpc: ec2.IVpc,
        security_group: ec2.ISecurityGroup,
        secrets_key: kms.IKey,
        file_system: fsx.IFileSystem,
    ) -> None:
        """``file_system``: the storage stack's FSx for Lustre file system, which the FSx CSI
        driver may resize."""
        super().__init__(scope, construct_id)
        self.eks_config = eks_config
        private_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        endpoint = (
            eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*eks_config.public_access_cidrs)
            if eks_config.endpoint_public_access
            else eks.EndpointAccess.PRIVATE
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            # The named constant: a version the pinned aws-cdk-lib does not know fails here.
            version=getattr(eks.KubernetesVersion, "V" + eks_config.kubernetes_version.replace(".", "_")),
            vpc=vpc,
            # Control plane ENIs in the private subnets only.
            vpc_subnets=[private_subnets],
            security_group=security_group,
            endpoint_access=endpoint,
            cluster_logging=list(CONTROL_PLANE_LOGS),
            secrets_encryption_key=secrets_key,
            # Not Auto Mode: managed node group capacity, none by default (the 'system' group
            # below is explicit).
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            # The CloudFormation deploy role is no cluster admin; admins come from config.
            bootstrap_cluster_creator_admin_permissions=False,
            # Installs vpc-cni, kube-proxy and coredns unmanaged; they are managed add-ons here.
            bootstrap_self_managed_addons=False,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer(self, eks_config.kubernetes_version),
                # In the private subnets, through the shared group (443 to the private endpoint).
                security_groups=[security_group],
            ),
            output_config_command=False,
        )
        cfn_cluster: eks.CfnCluster = self.cluster.node.default_child  # type: ignore[assignment]
        # aws_eks_v2 writes authenticationMode API; HyperPod accepts API or API_AND_CONFIG_MAP and
        # this platform uses API_AND_CONFIG_MAP (config/versions.py).
        cfn_cluster.add_property_override("AccessConfig.AuthenticationMode", versions.AUTHENTICATION_MODE)
        # EKS's VPC resource controller manages the trunk and branch interfaces of security
        # groups for pods with the cluster role (constructs/ray_heads.py).
        self.cluster.role.add_managed_policy(
            iam.ManagedPolicy.from_aws_managed_policy_name("AmazonEKSVPCResourceController")
        )
        # Explicit (EKS's API default, not the console's): EKS never upgrades the control plane on
        # its own at the end of standard support (config/versions.py EKS_SUPPORT_TYPE).
        cfn_cluster.add_property_override("UpgradePolicy.SupportType", versions.EKS_SUPPORT_TYPE)
        self._warn_extended_support()
        self._acknowledge_kubectl_provider()

        self.system_nodegroup = self._system_nodegroup(private_subnets)
        self.pool_rules = self._join_node_pools(security_group)
        self.addons = self._addons(
            Stack.of(self).format_arn(
                service="fsx",
                resource="file-system",
                resource_name=file_system.file_system_id,
                arn_format=ArnFormat.SLASH_RESOURCE_NAME,
            )
        )
        self.admin_access_entries = self._admin_access()

    @property
    def ready(self) -> tuple[IConstruct, ...]:
        """The system nodes and every add-on (networking, DNS, Pod Identity, the CSI drivers)."""
        return (self.system_nodegroup, *self.addons.values())

    def install(self, *installed: IConstruct, after: Sequence[IConstruct] = ()) -> None:
        """Orders charts and manifests installed on this cluster: their pods need the nodes and
        every add-on, so they come after :attr:`ready`, then after ``after``."""
        for construct in installed:
            construct.node.add_dependency(*self.ready, *after)

    def requires(
        self, construct: IConstruct, *addons: str, nodes: bool = False, after: Sequence[IConstruct] = ()
    ) -> None:
        """Orders ``construct`` after the named add-ons only (and the system nodes with ``nodes``),
        then after ``after``: for what needs one driver, not a running cluster."""
        construct.node.add_dependency(
            *after, *(self.addons[name] for name in addons), *((self.system_nodegroup,) if nodes else ())
        )

    def _warn_extended_support(self) -> None:
        """A synth warning with the monthly extra cost where the version is in extended support
        and the config has not acknowledged it (production cannot get here: a config error)."""
        version = self.eks_config.kubernetes_version
        if self.eks_config.extended_support_acknowledged or not versions.in_extended_support(version):
            return
        from config.prices import extended_support_cost_text

        _, end_standard, end_extended = versions.EKS_CALENDAR[version]
        Annotations.of(self.cluster).add_warning_v2(
            "hpray:eks-extended-support",
            f"Kubernetes {version} left EKS standard support on {end_standard.isoformat()} "
            f"(extended support until {end_extended.isoformat()}): this cluster costs "
            f"{extended_support_cost_text()}. Set eks.extended_support_acknowledged: true to "
            "accept it, or plan an upgrade (hpray upgrade plan).",
        )

    # -----------------------------------------------------------------------------------------

    def _system_nodegroup(self, subnets: ec2.SubnetSelection) -> eks.Nodegroup:
        nodes = self.eks_config.system_nodes
        nodegroup = self.cluster.add_nodegroup_capacity(
            "SystemNodes",
            nodegroup_name=SYSTEM_NODEGROUP,
            instance_types=[ec2.InstanceType(nodes.instance_type)],
            min_size=nodes.min_size,
            desired_size=nodes.desired_size,
            max_size=nodes.max_size,
            disk_size=nodes.disk_size_gib,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            capacity_type=eks.CapacityType.ON_DEMAND,
            subnets=subnets,
            labels={"platform.hyperpod-ray/role": SYSTEM_NODEGROUP},
            enable_node_auto_repair=True,
        )
        acknowledge(
            nodegroup.role,
            (
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSWorkerNodePolicy]",
                "EKS requires this AWS managed policy on the node role of a managed node group (EKS user guide, node IAM role).",
            ),
            (
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly]",
                "Nodes pull the EKS add-on and system images from ECR; read-only, as the EKS node role documentation requires.",
            ),
            (
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKS_CNI_Policy]",
                "The VPC CNI on these nodes assigns pod IPs from the VPC (HyperPod requires the VPC CNI); AWS documents this managed policy for it.",
            ),
        )
        return nodegroup

    def _join_node_pools(self, shared: ec2.ISecurityGroup) -> list[ec2.CfnSecurityGroupIngress]:
        """Rules between the two node pools (flows in ``constructs/network_flows.py``).

        The ``system`` node group has no launch template, so its nodes (and their pods: CoreDNS,
        the KubeRay operator, the Ray heads) get only the security group EKS creates for the
        cluster; HyperPod nodes and FSx use the shared group. Both groups allow all outbound.
        """
        cluster_group = self.cluster.cluster_security_group_id
        shared_group = shared.security_group_id
        specs = [
            (
                "SystemFromHyperPodDns",
                cluster_group,
                shared_group,
                "udp",
                (F.DNS_PORT, F.DNS_PORT),
                "DNS from HyperPod pods to CoreDNS",
            ),
            (
                "SystemFromHyperPodTcp",
                cluster_group,
                shared_group,
                "tcp",
                F.RAY_NODE_PORTS,
                "Ray workers to the heads (GCS, raylet, object manager, worker ports), Serve, DNS over TCP",
            ),
            (
                "HyperPodFromSystemTcp",
                shared_group,
                cluster_group,
                "tcp",
                F.RAY_NODE_PORTS,
                "Ray heads to the workers (raylet, object manager, worker ports) and Serve replicas",
            ),
            *[
                (
                    f"LustreFromSystem{lo}",
                    shared_group,
                    cluster_group,
                    "tcp",
                    (lo, hi),
                    f"Lustre {lo}-{hi} from the Ray heads on the system nodes",
                )
                for lo, hi in F.LUSTRE_PORTS
            ],
        ]
        return ingress_rules(self, specs)

    def _addons(self, file_system_arn: str) -> dict[str, eks.CfnAddon]:
        pins = versions.ADDON_VERSIONS[self.eks_config.kubernetes_version]
        cluster_name = self.cluster.cluster_name
        addons: dict[str, eks.CfnAddon] = {}

        def addon(construct_id: str, name: str, **kwargs: Any) -> eks.CfnAddon:
            resource = eks.CfnAddon(
                self,
                construct_id,
                addon_name=name,
                cluster_name=cluster_name,
                addon_version=pins[name],
                # The add-on owns its objects: a manual edit is overwritten, not a failed update.
                resolve_conflicts="OVERWRITE",
                **kwargs,
            )
            addons[name] = resource
            return resource

        # Networking before any node starts: vpc-cni and kube-proxy have no dependency on nodes.
        # The CNI's network policy agent enforces the Ray namespace's NetworkPolicies
        # (manifests/network_policy.py); without it Kubernetes accepts them and nothing
        # enforces them.
        vpc_cni = addon("VpcCni", "vpc-cni", configuration_values=json.dumps(VPC_CNI_CONFIGURATION, sort_keys=True))
        kube_proxy = addon("KubeProxy", "kube-proxy")
        pod_identity = addon("PodIdentityAgent", "eks-pod-identity-agent")
        for early in (vpc_cni, kube_proxy, pod_identity):
            self.system_nodegroup.node.add_dependency(early)

        def addon_with_role(construct_id: str, name: str, role: iam.IRole, service_account: str) -> None:
            """An add-on whose controller gets ``role`` through Pod Identity: after the nodes and the agent."""
            addon(
                construct_id,
                name,
                pod_identity_associations=[
                    eks.CfnAddon.PodIdentityAssociationProperty(role_arn=role.role_arn, service_account=service_account)
                ],
            ).node.add_dependency(self.system_nodegroup, pod_identity)

        # CoreDNS is a Deployment: it needs the nodes to become ACTIVE.
        coredns = addon(
            "CoreDns", "coredns", configuration_values=json.dumps(addons_config.COREDNS_CONFIGURATION, sort_keys=True)
        )
        coredns.node.add_dependency(self.system_nodegroup)

        self.fsx_csi_role = pod_identity_role(
            self, "FsxCsiDriverRole", description="FSx for Lustre CSI controller (Pod Identity)"
        )
        # Static provisioning only (one PersistentVolume for the storage stack's file system):
        # the controller describes file systems (no resource-level permission exists for
        # Describe*) and may resize this one file system; it creates and deletes nothing.
        self.fsx_csi_role.add_to_policy(
            iam.PolicyStatement(sid="DescribeFileSystems", actions=["fsx:DescribeFileSystems"], resources=["*"])
        )
        self.fsx_csi_role.add_to_policy(
            iam.PolicyStatement(
                sid="ResizeThisFileSystem", actions=["fsx:UpdateFileSystem"], resources=[file_system_arn]
            )
        )
        acknowledge(
            self.fsx_csi_role,
            (
                "AwsSolutions-IAM5[Resource::*]",
                "fsx:DescribeFileSystems supports no resource-level permissions (Service Authorization Reference); it is the only action on '*'.",
            ),
            (
                "NIST.800.53.R5-IAMNoInlinePolicy",
                "The role's statements live beside the add-on that needs them and are scoped to this cluster's one file system.",
            ),
        )
        addon_with_role("FsxCsiDriver", "aws-fsx-csi-driver", self.fsx_csi_role, FSX_CSI_CONTROLLER_SA)

        if self.eks_config.ray_token_auth:
            # The Secrets Store CSI driver and its AWS provider (ASCP) sync the Ray token into the
            # Kubernetes Secret KubeRay reads (manifests/security.py). No role of its own:
            # ASCP reads a secret with the Pod Identity of the pod that mounts it.
            secrets_store = addon(
                "SecretsStoreCsiDriver",
                SECRETS_STORE_DRIVER,
                configuration_values=json.dumps(addons_config.secrets_store_configuration(), sort_keys=True),
            )
            secrets_store.node.add_dependency(self.system_nodegroup, pod_identity)

        if self.eks_config.cloudwatch_observability:
            self.cloudwatch_role = pod_identity_role(
                self, "CloudWatchAgentRole", description="CloudWatch agent of the observability add-on (Pod Identity)"
            )
            # Not AWS's CloudWatchAgentServerPolicy: it allows logs writes and CreateLogGroup on
            # every log group of the account. The add-on's agent and Fluent Bit need metrics and the
            # describe calls below, which take no resource-level permissions (Service Authorization
            # Reference), and their own log groups, granted beside those groups
            # (constructs/observability.py). No X-Ray or SSM: Application Signals instruments no
            # workload of the platform, and the add-on configures the agent from a ConfigMap.
            self.cloudwatch_role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="AgentMetricsAndDescribes",
                    actions=["cloudwatch:PutMetricData", "ec2:DescribeTags", "ec2:DescribeVolumes"],
                    resources=["*"],
                )
            )
            acknowledge(
                self.cloudwatch_role,
                (
                    "AwsSolutions-IAM5[Resource::*]",
                    "cloudwatch:PutMetricData, ec2:DescribeTags and ec2:DescribeVolumes support no resource-level permissions (Service Authorization Reference); log writes are scoped to the container log groups.",
                ),
                (
                    "NIST.800.53.R5-IAMNoInlinePolicy",
                    "The agent's statements live beside the add-on and its log groups; the managed policy would allow every log group.",
                ),
            )
            addon_with_role(
                "CloudWatchObservability", "amazon-cloudwatch-observability", self.cloudwatch_role, CLOUDWATCH_AGENT_SA
            )
        return addons

    def _admin_access(self) -> list[eks.AccessEntry]:
        entries = []
        for i, arn in enumerate(self.eks_config.admin_principal_arns):
            entries.append(
                eks.AccessEntry(
                    self,
                    f"Admin{i}",
                    cluster=self.cluster,
                    principal=arn,
                    access_policies=[
                        eks.AccessPolicy.from_access_policy_name(
                            "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER
                        )
                    ],
                )
            )
        return entries

    def _acknowledge_kubectl_provider(self) -> None:
        """cdk-nag and checkov findings on the roles and functions aws-cdk-lib builds for the
        cluster and its kubectl provider (a CloudFormation custom resource provider)."""
        acknowledge(
            self.cluster.role,
            (
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSClusterPolicy]",
                "EKS requires this AWS managed policy on the cluster service role (EKS user guide, cluster IAM role); there is no scoped equivalent.",
            ),
            (
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSVPCResourceController]",
                "Security groups for pods require this AWS managed policy on the cluster role (EKS user guide, security groups for pods); EKS's controller manages the trunk interfaces with it.",
            ),
        )
        provider = self.cluster.node.find_child("KubectlProvider")
        handler = provider.node.find_child("Handler")
        framework = provider.node.find_child("Provider").node.find_child("framework-onEvent")
        ecr_public = (
            'AwsSolutions-IAM4[Policy::{"Fn::If":["'
            + Stack.of(self).get_logical_id(handler.node.find_child("HasEcrPublic"))
            + '",'
            '{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}]'
        )
        lambda_reasons = (
            (
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
                "aws-cdk-lib attaches it so the kubectl provider can write its own CloudWatch logs; it grants nothing else.",
            ),
            (
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]",
                "The provider runs in the private subnets to reach the private EKS endpoint; this policy only manages its own network interfaces.",
            ),
            (
                "NIST.800.53.R5-IAMNoInlinePolicy",
                "aws-cdk-lib writes the kubectl provider's inline policy: eks:DescribeCluster on this cluster and invoking its own handler.",
            ),
            (
                "NIST.800.53.R5-LambdaConcurrency",
                "A deploy-time custom resource handler invoked by CloudFormation a few times per deploy; a concurrency limit could only fail deploys.",
            ),
            (
                "NIST.800.53.R5-LambdaDLQ",
                "Invoked synchronously by CloudFormation, which reports any failure in the stack events; there is nothing for a dead-letter queue to hold.",
            ),
        )
        acknowledge(
            handler,
            *lambda_reasons,
            (
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly]",
                "aws-cdk-lib attaches it so helm can pull charts stored as OCI images in ECR; read-only.",
            ),
            (
                ecr_public,
                "aws-cdk-lib attaches the read-only ECR Public policy (commercial partition only) so helm can pull public OCI charts.",
            ),
            (
                "AwsSolutions-L1",
                "aws-cdk-lib picks the handler's Python runtime (the newest it knows); this app does not override library internals.",
            ),
        )
        acknowledge(
            framework,
            *lambda_reasons,
            (
                "AwsSolutions-IAM5[Resource::<"
                + Stack.of(self).get_logical_id(handler.node.default_child)
                + ".Arn>:*]",
                "The provider framework invokes only its own onEvent handler (all versions of that one function).",
            ),
        )
        for function in (handler, framework):
            # aws-cdk-lib adds a DependsOn on the role that the Role GetAtt already implies
            # (cfn-lint W3005): drop the redundant one.
            policy = function.role.node.find_child("DefaultPolicy").node.default_child
            function.node.default_child.add_override("DependsOn", [Stack.of(self).get_logical_id(policy)])  # type: ignore[union-attr]
            checkov_skip(
                function,
                "CKV_AWS_115",
                "Deploy-time custom resource handler invoked a few times per deploy; a concurrency limit could only fail deploys.",
            )
            checkov_skip(
                function,
                "CKV_AWS_116",
                "Invoked synchronously by CloudFormation, which reports failures in stack events; a DLQ would stay empty.",
            )
            checkov_skip(
                function,
                "CKV_AWS_173",
                "Its environment holds no secret (region endpoint setting, function names); encrypting it adds a key grant for nothing.",
            )

    @property
    def cluster_arn(self) -> str:
        return self.cluster.cluster_arn

    @property
    def cluster_name(self) -> str:
        return self.cluster.cluster_name

    @property
    def cluster_security_group_id(self) -> str:
        """The security group EKS creates for the cluster: the system nodes' only group."""
        return self.cluster.cluster_security_group_id

    def manifest(
        self, scope: Construct, construct_id: str, manifest: list[dict[str, Any]], **kwargs: Any
    ) -> eks.KubernetesManifest:
        """Kubernetes objects applied on this cluster (``eks.KubernetesManifest`` in ``scope``)."""
        return eks.KubernetesManifest(scope, construct_id, cluster=self.cluster, manifest=manifest, **kwargs)

    def helm_chart(self, scope: Construct, construct_id: str, **kwargs: Any) -> eks.HelmChart:
        """A Helm release installed on this cluster (``eks.HelmChart`` in ``scope``)."""
        return eks.HelmChart(scope, construct_id, cluster=self.cluster, **kwargs)

    def access_entry(self, scope: Construct, construct_id: str, **kwargs: Any) -> eks.AccessEntry:
        """An EKS access entry of this cluster (``eks.AccessEntry`` in ``scope``)."""
        return eks.AccessEntry(scope, construct_id, cluster=self.cluster, **kwargs)
