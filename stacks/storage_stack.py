"""Stateful storage, in its own stack so that it outlives cluster re-creation."""

from __future__ import annotations

from typing import Any

from aws_cdk import Annotations, CfnOutput
from constructs import Construct

from config.environment import EnvironmentConfig
from constructs.network import PlatformNetwork
from constructs.storage import LustreFileSystem, PlatformBuckets, PlatformKey
from constructs.team_access import team_token_key_statement
from manifests import registry
from sizing.plan import checkpoint_interval_warning
from stacks.base import PlatformStack


class StorageStack(PlatformStack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvironmentConfig,
        network: PlatformNetwork,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, config=config, description="stateful storage", **kwargs)
        removal = self.removal_policy
        self.platform_key = PlatformKey(self, "PlatformKey", removal_policy=removal).key
        if config.eks.ray_token_auth:
            # Each team's members decrypt their own Ray token only (constructs/team_access.py).
            for team in config.teams:
                self.platform_key.add_to_resource_policy(
                    team_token_key_statement(team=team, name_prefix=config.name_prefix, stack=self)
                )
        self.buckets = PlatformBuckets(
            self,
            "Buckets",
            names=config.bucket_names(),
            storage_config=config.storage,
            key=self.platform_key,
            removal_policy=removal,
        )
        first_subnet = network.hyperpod_subnets[config.network.hyperpod_subnets[0].az_id]
        self.lustre = LustreFileSystem(
            self,
            "Lustre",
            fsx_config=config.fsx,
            vpc=network.vpc,
            subnet=first_subnet,
            security_group=network.security_group,
            key=self.platform_key,
            bucket=self.buckets.checkpoints,
            removal_policy=removal,
        )
        self.file_system = self.lustre.file_system
        warning = checkpoint_interval_warning(config, registry.plan_of(config))
        if warning is not None:  # a warning, not an error: the run works, it loses some goodput
            Annotations.of(self.lustre).add_warning_v2("hpray:checkpoint-interval", warning)
        CfnOutput(self, "PlatformKeyArn", value=self.platform_key.key_arn)
        CfnOutput(self, "CheckpointBucketName", value=self.buckets.checkpoints.bucket_name)
        CfnOutput(self, "LifecycleScriptsBucketName", value=self.buckets.lifecycle_scripts.bucket_name)
        CfnOutput(self, "FileSystemId", value=self.file_system.file_system_id)
        CfnOutput(self, "FileSystemDnsName", value=self.file_system.dns_name)
        CfnOutput(self, "FileSystemMountName", value=self.file_system.mount_name)
