"""The SageMaker HyperPod cluster (``AWS::SageMaker::Cluster``, EKS orchestrator), its instance
groups from config, and the least-privilege execution role its nodes run as.

EKS access entry for the execution role: made in exactly one place, by HyperPod itself. On
CreateCluster/UpdateCluster for an EKS-orchestrated cluster, HyperPod creates the access entries
of the instance groups' execution roles (``ClusterMetadata.EksRoleAccessEntries``: "created by
HyperPod on your behalf"; the ``AWS::SageMaker::Cluster`` handler asks for
``eks:CreateAccessEntry`` and ``eks:AssociateAccessPolicy`` for this). This app therefore creates
no ``AWS::EKS::AccessEntry`` for the role: a second one would collide with HyperPod's (EKS
answers 409 ResourceInUse). ``tests/stacks/test_hyperpod_stack.py`` guards that.

Replacement: ``ClusterName``, ``VpcConfig`` and ``Orchestrator.Eks`` are create-only in the
CloudFormation schema; see README "HyperPod: what replaces the cluster".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from config.hyperpod import HyperPod, InstanceGroup
from constructs.access_flows import ENI_ACTIONS
from constructs.compliance import acknowledge
from constructs.eks_cluster import PlatformEksCluster
from constructs.hyperpod_dependencies import HyperPodDependencies
from constructs.image_cache import pull_through_acknowledgements, pull_through_import_statement
from constructs.lifecycle_scripts import LifecycleScripts, nag_env

# ENI actions that IAM's action table says also authorize the instance and security groups.
ENI_NODE_ACTIONS = ("ec2:DetachNetworkInterface", "ec2:ModifyNetworkInterfaceAttribute")

# AWS managed policy for HyperPod cluster instances (CloudWatch logs/metrics under
# /aws/sagemaker/Clusters, read of s3://sagemaker-* buckets, SSM for node access).
INSTANCE_ROLE_MANAGED_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"

# What the EKS orchestrator needs on the nodes beyond the managed policy (HyperPod EKS execution
# role, AWS docs and AWS's reference templates): the VPC CNI manages ENIs and secondary IPs in
# the HyperPod subnets, the kubelet pulls images from ECR, the Pod Identity agent exchanges tokens.
EC2_DESCRIBE_ACTIONS = (
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
)
ECR_PULL_ACTIONS = ("ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")


class HyperPodExecutionRole(Construct):
    """The role every HyperPod node assumes (``ExecutionRole`` of each instance group)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        eks_cluster: PlatformEksCluster,
        subnets: Sequence[ec2.ISubnet],
        security_group: ec2.ISecurityGroup,
        scripts: LifecycleScripts,
        volume_key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description="HyperPod node execution role (EKS orchestrator)",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(INSTANCE_ROLE_MANAGED_POLICY)],
        )

        def ec2_arn(resource: str) -> str:
            return stack.format_arn(service="ec2", resource=resource)

        def ec2_arn_any_account(resource: str) -> str:
            return stack.format_arn(service="ec2", account="*", resource=resource)

        subnet_arns = [ec2_arn(f"subnet/{s.subnet_id}") for s in subnets]
        eni_arn = ec2_arn("network-interface/*")
        ecr_arn = stack.format_arn(service="ecr", account="*", resource="repository/*")
        statements = [
            iam.PolicyStatement(
                sid="CreateEnisInHyperPodSubnets",
                actions=["ec2:CreateNetworkInterface"],
                resources=[*subnet_arns, ec2_arn(f"security-group/{security_group.security_group_id}"), eni_arn],
            ),
            iam.PolicyStatement(
                sid="ManageEnisInHyperPodSubnets",
                actions=list(ENI_ACTIONS),
                resources=[eni_arn],
                conditions={"ArnEquals": {"ec2:Subnet": subnet_arns}},
            ),
            # DetachNetworkInterface and ModifyNetworkInterfaceAttribute also authorize the instance
            # and the security groups the request touches (IAM's action table, Service Authorization
            # Reference for EC2); ec2:Subnet does not exist for those resources, so they get their own
            # statement. HyperPod instances are not in this account's EC2 inventory: any account.
            iam.PolicyStatement(
                sid="EniActionsOnNodesAndGroups",
                actions=list(ENI_NODE_ACTIONS),
                resources=[
                    ec2_arn_any_account("instance/*"),
                    ec2_arn(f"security-group/{security_group.security_group_id}"),
                ],
            ),
            iam.PolicyStatement(
                sid="TagNewEnis",
                actions=["ec2:CreateTags"],
                resources=[eni_arn],
                conditions={"StringEquals": {"ec2:CreateAction": "CreateNetworkInterface"}},
            ),
            iam.PolicyStatement(sid="DescribeNetwork", actions=list(EC2_DESCRIBE_ACTIONS), resources=["*"]),
            iam.PolicyStatement(sid="EcrToken", actions=["ecr:GetAuthorizationToken"], resources=["*"]),
            # The Serve LLM image comes through the Docker Hub pull-through cache (constructs/image_cache.py).
            pull_through_import_statement(stack),
            iam.PolicyStatement(
                sid="EcrPullInRegion",
                actions=list(ECR_PULL_ACTIONS),
                resources=[ecr_arn],
            ),
            iam.PolicyStatement(
                sid="PodIdentityOnThisCluster",
                actions=["eks-auth:AssumeRoleForPodIdentity"],
                resources=[eks_cluster.cluster_arn],
            ),
            iam.PolicyStatement(
                sid="ReadLifecycleScripts",
                actions=["s3:GetObject"],
                resources=[scripts.objects_arn],
            ),
            iam.PolicyStatement(
                sid="ListLifecycleScripts",
                actions=["s3:ListBucket"],
                resources=[scripts.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [scripts.key_prefix, f"{scripts.key_prefix}*"]}},
            ),
        ]
        # Node EBS volumes are encrypted with the platform key: HyperPod creates grants on it for
        # scale-out, node replacement and software updates (SageMaker developer guide, "Customer
        # managed AWS KMS key encryption for SageMaker HyperPod",
        # https://docs.aws.amazon.com/sagemaker/latest/dg/smcluster-cmk.html). Grants only for AWS
        # resources (kms:GrantIsForAWSResource). The key policy's account statement delegates this
        # to IAM; naming the role in the key policy would make the storage stack depend on this one.
        statements += [
            iam.PolicyStatement(
                sid="EbsVolumeKeyGrants",
                actions=["kms:CreateGrant"],
                resources=[volume_key.key_arn],
                conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
            ),
            iam.PolicyStatement(
                sid="EbsVolumeKeyDescribe", actions=["kms:DescribeKey"], resources=[volume_key.key_arn]
            ),
        ]
        for statement in statements:
            self.role.add_to_policy(statement)
        # The scripts bucket is SSE-KMS with the platform key.
        if scripts.bucket.encryption_key is not None:
            scripts.bucket.encryption_key.grant_decrypt(self.role)

        acknowledge(
            self.role,
            (
                f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{INSTANCE_ROLE_MANAGED_POLICY}]",
                "AWS's managed policy for HyperPod cluster instances; AWS documents it as required for the execution role and maintains it as HyperPod changes.",
            ),
            (
                "NIST.800.53.R5-IAMNoInlinePolicy",
                "The inline statements belong to this one role, are versioned with it and are scoped to this cluster's subnets, bucket prefix and EKS cluster.",
            ),
        )
        policy = self.role.node.find_child("DefaultPolicy")
        partition, region, account = nag_env(stack)
        acknowledge(policy, *pull_through_acknowledgements(partition, region, account))
        acknowledge(
            policy,
            (
                "AwsSolutions-IAM5[Resource::*]",
                'ec2:Describe* and ecr:GetAuthorizationToken support no resource-level permissions; AWS requires Resource "*" for them.',
            ),
            (
                f"AwsSolutions-IAM5[Resource::arn:{partition}:ec2:{region}:{account}:network-interface/*]",
                "ENI IDs are chosen by EC2 when the VPC CNI creates them; the statements are limited to ENIs in the HyperPod subnets by the ec2:Subnet condition.",
            ),
            (
                f"AwsSolutions-IAM5[Resource::arn:{partition}:ec2:{region}:*:instance/*]",
                "The VPC CNI detaches and modifies ENIs on the node it runs on; HyperPod node instance IDs (and their owning account) are assigned at launch, so only the resource type can be named.",
            ),
            (
                f"AwsSolutions-IAM5[Resource::arn:{partition}:ecr:{region}:*:repository/*]",
                "Nodes pull EKS add-on and HyperPod agent images from AWS-owned registries whose account IDs differ per region; pulls stay in this region.",
            ),
            (
                f"AwsSolutions-IAM5[Resource::{scripts.objects_arn_for_nag()}]",
                "Read-only access to exactly the objects of the current lifecycle-scripts upload (its content-hash prefix); the object names are the scripts.",
            ),
        )


class HyperPodCluster(Construct):
    """``AWS::SageMaker::Cluster`` on the EKS cluster, one instance group per config entry."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        hyperpod_config: HyperPod,
        cluster_name: str,
        eks_cluster: PlatformEksCluster,
        subnets: Mapping[str, ec2.ISubnet],
        security_group: ec2.ISecurityGroup,
        key: kms.IKey,
        scripts: LifecycleScripts,
        node_dependencies: HyperPodDependencies | None = None,
    ) -> None:
        """``node_dependencies``: what HyperPod needs installed on the EKS cluster first."""
        super().__init__(scope, construct_id)
        self.config = hyperpod_config
        self.cluster_name = cluster_name
        self.eks_cluster = eks_cluster
        self.scripts = scripts
        ordered_subnets = list(subnets.values())
        self.execution_role = HyperPodExecutionRole(
            self,
            "ExecutionRole",
            eks_cluster=eks_cluster,
            subnets=ordered_subnets,
            security_group=security_group,
            scripts=scripts,
            volume_key=key,
        ).role
        self._subnets = subnets
        # The same for every instance group; read once (each read is a round trip to the jsii
        # kernel: 3 per group made a 100-group config 0.1 s slower to synthesize).
        self._role_arn = self.execution_role.role_arn
        self._key_arn = key.key_arn
        self._security_group_ids = [security_group.security_group_id]
        self._life_cycle_config = sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
            source_s3_uri=scripts.source_s3_uri,
            on_create=scripts.on_create,
        )

        self.cluster = sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=eks_cluster.cluster_arn)
            ),
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=self._security_group_ids,
                subnets=[s.subnet_id for s in ordered_subnets],
            ),
            node_recovery=hyperpod_config.node_recovery,
            node_provisioning_mode=hyperpod_config.node_provisioning_mode,
            instance_groups=[self._instance_group(g) for g in hyperpod_config.instance_groups],
        )
        # The scripts must be on S3 before a node starts, and the role's policy in place (the role
        # itself is already ordered by the ExecutionRole GetAtt).
        self.cluster.node.add_dependency(scripts.upload)
        self.cluster.node.add_dependency(self.execution_role.node.find_child("DefaultPolicy"))
        # AWS requires the HyperPod dependency charts on the EKS cluster before cluster creation.
        if node_dependencies is not None:
            self.cluster.node.add_dependency(*node_dependencies.installed)

    @property
    def cluster_arn(self) -> str:
        return self.cluster.attr_cluster_arn

    def _instance_group(self, group: InstanceGroup) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        checks = group.effective_deep_health_checks
        kubernetes = None
        if group.labels or group.taints:
            kubernetes = sagemaker.CfnCluster.ClusterKubernetesConfigProperty(
                labels=dict(sorted(group.labels.items())) or None,
                taints=[
                    sagemaker.CfnCluster.ClusterKubernetesTaintProperty(
                        key=t.key,
                        # The schema's Value has a minimum length of 1: an empty value is omitted.
                        value=t.value or None,
                        effect=t.effect,
                    )
                    for t in group.taints
                ]
                or None,
            )
        override = None
        if group.subnet_az_id is not None:
            override = sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=self._security_group_ids,
                subnets=[self._subnets[group.subnet_az_id].subnet_id],
            )
        return sagemaker.CfnCluster.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            instance_count=group.instance_count,
            execution_role=self._role_arn,
            threads_per_core=group.threads_per_core,
            life_cycle_config=self._life_cycle_config,
            instance_storage_configs=[
                sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                    ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(
                        volume_size_in_gb=group.ebs_volume_gib,
                        volume_kms_key_id=self._key_arn,
                    )
                )
            ],
            on_start_deep_health_checks=checks or None,
            kubernetes_config=kubernetes,
            override_vpc_config=override,
            training_plan_arn=group.training_plan_arn,
        )
