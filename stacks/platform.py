"""Build every stack of one environment into a scope (an App or a pipeline Stage)."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Tags
from constructs import Construct

from config.environment import EnvironmentConfig
from config.facts.names import stack_prefix
from stacks.cluster_stack import ClusterStack
from stacks.hyperpod_stack import HyperPodStack
from stacks.network_stack import NetworkStack
from stacks.storage_stack import StorageStack


@dataclass(frozen=True)
class PlatformStacks:
    network: NetworkStack
    storage: StorageStack
    cluster: ClusterStack
    hyperpod: HyperPodStack


def build_platform(scope: Construct, config: EnvironmentConfig) -> PlatformStacks:
    prefix = stack_prefix(config.name_prefix)
    network_stack = NetworkStack(scope, f"{prefix}Network", config=config)
    network = network_stack.network
    storage = StorageStack(scope, f"{prefix}Storage", config=config, network=network)
    cluster_stack = ClusterStack(scope, f"{prefix}Cluster", config=config, network=network, storage=storage)
    hyperpod = HyperPodStack(
        scope,
        f"{prefix}HyperPod",
        config=config,
        network=network,
        key=storage.platform_key,
        lifecycle_bucket=storage.buckets.lifecycle_scripts,
        eks_cluster=cluster_stack.eks,
        node_dependencies=cluster_stack.hyperpod_node_dependencies,
    )
    # The execution role's EKS access entry: HyperPod creates it itself when it creates the cluster
    # (one declared here would collide with it), so no stack declares one (tests/stacks/test_cluster_stack.py).
    for key, value in config.tags.as_dict().items():
        Tags.of(scope).add(key, value)
    return PlatformStacks(network=network_stack, storage=storage, cluster=cluster_stack, hyperpod=hyperpod)
