"""The typed, frozen model of one environment's configuration: the public import path.

The sections live in one module each (config/network.py, eks.py, hyperpod.py, storage.py,
tags.py, training.py, inference.py, placement.py) and the whole environment with its
cross-section rules in config/environment.py; this module re-exports them so that
``from config.model import EnvironmentConfig, Eks, ...`` keeps working.
"""

from __future__ import annotations

from config.eks import Eks, SystemNodeGroup
from config.environment import CROSS_CHECKS, EnvironmentConfig
from config.fields import (
    ACCOUNT_RE,
    AZ_ID_RE,
    IAM_PRINCIPAL_ARN_RE,
    PREFIX_RE,
    REGION_RE,
    AccountId,
    AzId,
    RegionName,
    k8s_key_problem,
    k8s_value_problem,
)
from config.hyperpod import (
    DEEP_HEALTH_CHECKS,
    MAX_INSTANCE_GROUPS,
    MAX_INSTANCES_PER_GROUP,
    HyperPod,
    InstanceGroup,
    Taint,
)
from config.inference import Inference
from config.network import AvailabilityZone, HyperPodSubnet, Network
from config.storage import Fsx, Storage
from config.tags import REQUIRED_TAGS, Tags
from config.training import Training

__all__ = [
    "ACCOUNT_RE",
    "AZ_ID_RE",
    "CROSS_CHECKS",
    "DEEP_HEALTH_CHECKS",
    "IAM_PRINCIPAL_ARN_RE",
    "MAX_INSTANCES_PER_GROUP",
    "MAX_INSTANCE_GROUPS",
    "PREFIX_RE",
    "REGION_RE",
    "REQUIRED_TAGS",
    "AccountId",
    "AvailabilityZone",
    "AzId",
    "Eks",
    "EnvironmentConfig",
    "Fsx",
    "HyperPod",
    "HyperPodSubnet",
    "Inference",
    "InstanceGroup",
    "Network",
    "RegionName",
    "Storage",
    "SystemNodeGroup",
    "Tags",
    "Taint",
    "Training",
    "k8s_key_problem",
    "k8s_value_problem",
]
