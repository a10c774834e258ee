"""Base of every platform stack: environment, termination protection, AZs without lookups."""

from __future__ import annotations

from typing import Any

from aws_cdk import Environment, RemovalPolicy, Stack
from constructs import Construct

from config.environment import EnvironmentConfig


class PlatformStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: EnvironmentConfig, description: str, **kwargs: Any
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            env=Environment(account=config.account, region=config.region),
            description=f"HyperPod Ray platform ({config.name}): {description}",
            termination_protection=config.production,
            # Stack-level tags are explicit (@aws-cdk/core:explicitStackTags in cdk.json): the
            # Tags.of() in build_platform tags the template's resources, not the stack.
            tags=config.tags.as_dict(),
            **kwargs,
        )
        self.config = config

    @property
    def availability_zones(self) -> list[str]:
        """The AZs from config: synth never asks EC2 (no context lookup, no 'dummy1a')."""
        return [z.name for z in self.config.network.availability_zones]

    @property
    def removal_policy(self) -> RemovalPolicy:
        """RETAIN for stateful resources in production; DESTROY elsewhere so dev tears down."""
        return RemovalPolicy.RETAIN if self.config.production else RemovalPolicy.DESTROY
