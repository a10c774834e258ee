"""The EKS cluster that orchestrates HyperPod: control plane, system nodes, add-ons, the KubeRay
operator, HyperPod's node dependencies, FSx volume objects and the Ray workloads' namespace."""

from __future__ import annotations

from typing import Any

from aws_cdk import ArnFormat, CfnOutput
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from config.model import EnvironmentConfig
from constructs.eks_cluster import PlatformEksCluster
from constructs.network import PlatformNetwork
from stacks.base import PlatformStack
from stacks.storage_stack import StorageStack


class ClusterStack(PlatformStack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvironmentConfig,
        network: PlatformNetwork,
        storage: StorageStack,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, config=config, description="EKS cluster", **kwargs)
        file_system_arn = self.format_arn(
            service="fsx",
            resource="file-system",
            resource_name=storage.lustre.file_system.file_system_id,
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        self.eks = PlatformEksCluster(
            self,
            "Eks",
            eks_config=config.eks,
            cluster_name=config.eks_cluster_name,
            vpc=network.vpc,
            security_group=network.security_group,
            secrets_key=storage.platform_key,
            file_system_arn=file_system_arn,
        )
        self.cluster: eks.Cluster = self.eks.cluster
        # Filled by the HyperPod-dependency charts and manifests; the HyperPod cluster depends on
        # every one of them (AWS requires them before the HyperPod cluster is created).
        self.hyperpod_dependencies: tuple[IConstruct, ...] = ()

        CfnOutput(self, "ClusterName", value=self.cluster.cluster_name)
        CfnOutput(self, "ClusterArn", value=self.cluster.cluster_arn)
        CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --name {config.eks_cluster_name} --region {config.region}",
        )

    def grant_hyperpod_access(self, role: iam.IRole) -> None:
        """The HyperPod execution role's EKS access: nothing to create here, on purpose.

        HyperPod creates the access entry of each instance group's execution role itself when the
        HyperPod cluster is created (a second ``AWS::EKS::AccessEntry`` would collide with it).
        The method exists so that the HyperPod stack states the relation in one place.
        """
        del role
