"""Network: VPC, HyperPod subnets, shared security group, endpoints, flow logs."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput
from constructs import Construct

from config.environment import EnvironmentConfig
from constructs.network import PlatformNetwork
from stacks.base import PlatformStack


class NetworkStack(PlatformStack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvironmentConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, config=config, description="network", **kwargs)
        self.network = PlatformNetwork(
            self,
            "Network",
            network_config=config.network,
            production=config.production,
            removal_policy=self.removal_policy,
        )
        CfnOutput(self, "VpcId", value=self.network.vpc.vpc_id)
        CfnOutput(self, "SharedSecurityGroupId", value=self.network.security_group.security_group_id)
        for az_id, subnet in self.network.hyperpod_subnets.items():
            CfnOutput(self, f"HyperPodSubnet{az_id.replace('-', '').capitalize()}Id", value=subnet.subnet_id)
