"""GPU compute: the HyperPod cluster on the EKS control plane, its execution role and the
lifecycle scripts it boots with. Its own stack: it is created and replaced on its own schedule,
after the EKS stack and its HyperPod dependency charts, and never holds state."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from config.environment import EnvironmentConfig
from constructs.eks_cluster import PlatformEksCluster
from constructs.hyperpod_cluster import HyperPodCluster
from constructs.hyperpod_dependencies import HyperPodDependencies
from constructs.lifecycle_scripts import LifecycleScripts
from constructs.network import PlatformNetwork
from constructs.storage import literal_bucket_name
from stacks.base import PlatformStack


class HyperPodStack(PlatformStack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvironmentConfig,
        network: PlatformNetwork,
        key: kms.IKey,
        lifecycle_bucket: s3.IBucket,
        eks_cluster: PlatformEksCluster,
        node_dependencies: HyperPodDependencies | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, config=config, description="HyperPod cluster", **kwargs)
        # The storage stack's bucket, by its literal name: the IAM statements and their cdk-nag
        # acknowledgements then name a real ARN instead of a cross-stack token.
        bucket = s3.Bucket.from_bucket_attributes(
            self,
            "LifecycleScriptsBucket",
            bucket_name=literal_bucket_name(lifecycle_bucket),
            encryption_key=key,
        )
        # The bucket must exist before the upload writes to it.
        self.add_stack_dependency(Stack.of(lifecycle_bucket))
        self.scripts = LifecycleScripts(
            self,
            "LifecycleScripts",
            bucket=bucket,
            vpc=network.vpc,
            security_group=network.security_group,
            # Always keep old uploads: with False, BucketDeployment deletes the previous prefix as
            # soon as the prefix changes, while the cluster (updated after it) still points there
            # and a node replaced in between would find no scripts. The bucket is versioned, so
            # deleting objects would not empty it for a teardown anyway.
            retain_on_delete=True,
        )
        self.hyperpod = HyperPodCluster(
            self,
            "HyperPod",
            hyperpod_config=config.hyperpod,
            cluster_name=config.hyperpod_cluster_name,
            eks_cluster=eks_cluster,
            subnets=network.hyperpod_subnets,
            security_group=network.security_group,
            key=key,
            scripts=self.scripts,
            node_dependencies=node_dependencies,
        )
        CfnOutput(self, "ClusterName", value=self.hyperpod.cluster_name, description="HyperPod cluster name")
        CfnOutput(self, "ClusterArn", value=self.hyperpod.cluster_arn, description="HyperPod cluster ARN")
        # The instance groups' execution role. Its EKS access entry is HyperPod's to create, when it
        # creates the cluster: no stack declares one (stacks/platform.py).
        self.execution_role = self.hyperpod.execution_role
        CfnOutput(self, "ExecutionRoleArn", value=self.execution_role.role_arn)
        CfnOutput(self, "LifecycleScriptsUri", value=self.scripts.source_s3_uri)
