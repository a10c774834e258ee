"""The EKS cluster that orchestrates HyperPod: control plane, system nodes, add-ons, the KubeRay
operator, HyperPod's node dependencies, FSx volume objects, the Ray workloads' namespace and
the workloads image."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct, IConstruct

from config import observability as obs
from config.environment import EnvironmentConfig
from constructs.device_plugin_image import NvidiaDevicePluginImage
from constructs.eks_cluster import PlatformEksCluster
from constructs.flows import s3_locations
from constructs.gcs_store import GcsStore
from constructs.helm import HelmRelease
from constructs.hyperpod_dependencies import (
    HyperPodDependencies,
    device_plugin_releases,
    hyperpod_dependency_manifests,
)
from constructs.image_cache import ImageCache
from constructs.kuberay import kuberay_operator_release, operator_image_repository
from constructs.network import PlatformNetwork
from constructs.observability import PlatformObservability
from constructs.ray_auth import RayAuthToken
from constructs.ray_heads import RayHeadSecurity
from constructs.team_access import TeamAccess, deny_token_read
from constructs.workloads_access import WorkloadsAccess
from constructs.workloads_image import WorkloadsImage
from constructs.workloads_security import WorkloadsSecurity, ray_namespace_manifests
from manifests import image
from manifests.k8s import NAMESPACE
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
        self.eks = PlatformEksCluster(
            self,
            "Eks",
            eks_config=config.eks,
            cluster_name=config.eks_cluster_name,
            vpc=network.vpc,
            security_group=network.security_group,
            secrets_key=storage.platform_key,
            file_system=storage.file_system,
        )
        self.cluster: eks.Cluster = self.eks.cluster
        # What is installed on the cluster waits for it: PlatformEksCluster.install and .requires.
        self.hyperpod_node_dependencies = HyperPodDependencies(
            self,
            "HyperPodDependencies",
            cluster=self.eks,
            manifests=hyperpod_dependency_manifests(config),
            releases=device_plugin_releases(config),
        )
        # The HyperPod cluster depends on every one of these (AWS requires them before the
        # HyperPod cluster is created).
        self.hyperpod_dependencies: tuple[IConstruct, ...] = self.hyperpod_node_dependencies.installed
        self.workloads = WorkloadsAccess(
            self,
            "Workloads",
            cluster=self.eks,
            checkpoint_bucket=storage.buckets.checkpoints,
            # Every S3 prefix a workload reads or writes, from config (checkpoints, data, weights).
            locations=s3_locations(config),
            key=storage.platform_key,
            file_system=storage.file_system,
            fsx_config=config.fsx,
        )
        # The token of Ray's token authentication (manifests.security): every Ray pod runs
        # as the workloads' service account and reads it through the Secrets Store CSI driver.
        self.ray_auth = RayAuthToken(
            self,
            "RayAuth",
            name_prefix=config.name_prefix,
            key=storage.platform_key,
            readers=[self.workloads.role],
        )
        # The Ray heads' own security group (EKS security groups for pods): what admits the heads
        # (the GCS store) admits no other pod of the system nodes.
        self.ray_heads = RayHeadSecurity(
            self,
            "RayHeads",
            vpc=network.vpc,
            cluster=self.eks,
            shared_security_group=network.security_group,
            namespace=self.workloads.namespace,
        )
        # GCS fault tolerance of every RayService (config inference.gcs_fault_tolerance): the
        # heads keep the cluster's metadata in ElastiCache for Valkey and survive a lost head pod.
        self.gcs_store = (
            GcsStore(
                self,
                "GcsStore",
                name_prefix=config.name_prefix,
                gcs_config=config.inference.gcs_fault_tolerance,
                vpc=network.vpc,
                client_security_group=self.ray_heads.security_group,
                key=storage.platform_key,
                readers=[self.workloads.role],
                cluster=self.eks,
                namespace=self.workloads.namespace,
            )
            if config.gcs_fault_tolerance
            else None
        )
        # The Ray namespace's NetworkPolicies and the SecretProviderClass that syncs the token.
        self.workloads_security = WorkloadsSecurity(
            self,
            "WorkloadsSecurity",
            cluster=self.eks,
            manifests=ray_namespace_manifests(config),
            workloads=self.workloads,
            ray_auth=self.ray_auth,
            gcs_store=self.gcs_store,
        )
        # The image every RayJob/RayService runs: built and pushed by `cdk deploy` (and the
        # pipeline's asset stage); the manifests name the same URI (manifests.image).
        self.workloads_image = WorkloadsImage(self, "WorkloadsImage")
        # Team namespaces, quotas, namespace-scoped access entries, each team's own Pod Identity
        # role and Ray token (config `teams`); no team member may read the platform's tokens.
        members = [a for t in config.teams for a in t.principal_arns]
        deny_token_read(self.ray_auth.secret, members, sid="TeamsDeny")
        if self.gcs_store is not None:
            deny_token_read(self.gcs_store.secret, members, sid="TeamsDeny")
        self.teams = (
            TeamAccess(
                self,
                "Teams",
                cluster=self.eks,
                teams=config.teams,
                name_prefix=config.name_prefix,
                checkpoint_bucket=storage.buckets.checkpoints,
                key=storage.platform_key,
                vpc_cidr=config.network.vpc_cidr,
                token_auth=config.eks.ray_token_auth,
            )
            if config.teams
            else None
        )
        # network.images_from_ecr: every image from ECR: pull-through caches, and the NVIDIA device
        # plugin as a CDK image asset (published before this stack deploys).
        self.image_cache = (
            ImageCache(
                self,
                "ImageCache",
                pullers=[self.eks.system_nodegroup.role],
                docker_hub_credential=(
                    secretsmanager.Secret.from_secret_complete_arn(
                        self, "DockerHubCredential", config.network.docker_hub_credential_secret_arn
                    )
                    if config.network.docker_hub_credential_secret_arn
                    else None
                ),
            )
            if config.network.images_from_ecr
            else None
        )
        self.device_plugin_image = (
            NvidiaDevicePluginImage(self, "NvidiaDevicePluginImage")
            if config.network.images_from_ecr and config.gpu_device_plugin_instance_types()
            else None
        )
        self.kuberay = HelmRelease(
            self,
            "KubeRayOperator",
            cluster=self.eks,
            release=kuberay_operator_release(
                config.eks,
                team_namespaces=tuple(t.resolved_namespace for t in config.teams),
                image_repository=operator_image_repository(config),
            ),
            # The operator's namespaced RBAC goes into the workloads' and the teams' namespaces:
            # they must exist first; its first pull goes through the image cache's quay.io rule.
            after=[
                self.workloads.namespace,
                *(self.teams.manifests.values() if self.teams else ()),
                *((self.image_cache,) if self.image_cache is not None else ()),
            ],
        )

        # Metrics to Amazon Managed Prometheus, container logs to CloudWatch Logs, alarms to SNS
        # (config `observability`).
        self.observability = PlatformObservability(
            self,
            "Observability",
            observability_config=config.observability,
            name_prefix=config.name_prefix,
            cluster_name=config.eks_cluster_name,
            hyperpod_cluster_name=config.hyperpod_cluster_name,
            cluster=self.eks,
            vpc=network.vpc,
            hyperpod_security_group=network.security_group,
            key=storage.platform_key,
            removal_policy=self.removal_policy,
        )
        self.ray_heads.admit_scraper(self.observability.scraper_security_group, obs.RAY_METRICS_PORT)
        CfnOutput(self, "MetricsWorkspaceUrl", value=self.observability.workspace.attr_prometheus_endpoint)
        CfnOutput(self, "AlarmTopicArn", value=self.observability.topic.topic_arn)
        CfnOutput(
            self,
            "ContainerLogGroup",
            value=self.observability.log_groups["application"].log_group_name,
        )

        # What `hpray submit` reads to run the workloads image (never a hash of the files beside an installed CLI).
        self.workloads_image_config = self.eks.manifest(
            self,
            "WorkloadsImageConfig",
            [image.deployed_config_map(self.workloads_image.asset.image_uri, NAMESPACE)],
        )
        self.eks.requires(self.workloads_image_config, after=[self.workloads.namespace])

        CfnOutput(self, "ClusterName", value=self.cluster.cluster_name)
        CfnOutput(self, "ClusterArn", value=self.cluster.cluster_arn)
        CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --name {config.eks_cluster_name} --region {config.region}",
        )
