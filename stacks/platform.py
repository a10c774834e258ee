"""Build every stack of one environment into a scope (an App or a pipeline Stage)."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Tags
from constructs import Construct

from config.model import EnvironmentConfig
from stacks.hyperpod_stack import HyperPodStack
from stacks.network_stack import NetworkStack
from stacks.storage_stack import StorageStack


@dataclass(frozen=True)
class PlatformStacks:
    network: NetworkStack
    storage: StorageStack
    hyperpod: HyperPodStack


def stack_prefix(config: EnvironmentConfig) -> str:
    return "".join(part.capitalize() for part in config.name_prefix.split("-"))


def build_platform(scope: Construct, config: EnvironmentConfig) -> PlatformStacks:
    prefix = stack_prefix(config)
    network = NetworkStack(scope, f"{prefix}Network", config=config)
    storage = StorageStack(scope, f"{prefix}Storage", config=config, network=network.network)
    # TODO(eks merge): the EKS stack's cluster and HyperPod dependency charts replace this stand-in
    # (an imported reference by name: it adds no resource anywhere).
    from aws_cdk import aws_eks_v2 as eks

    eks_stand_in = eks.Cluster.from_cluster_attributes(network, "EksClusterStandIn", cluster_name=config.eks_cluster_name)
    hyperpod = HyperPodStack(
        scope,
        f"{prefix}HyperPod",
        config=config,
        network=network.network,
        key=storage.platform_key,
        lifecycle_bucket=storage.buckets.lifecycle_scripts,
        eks_cluster=eks_stand_in,
        dependency_charts=(),
    )
    for key, value in config.tags.as_dict().items():
        Tags.of(scope).add(key, value)
    return PlatformStacks(network=network, storage=storage, hyperpod=hyperpod)
