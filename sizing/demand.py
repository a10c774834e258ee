"""What a workload asks Ray for at its maximum (``Demand``): the bundles its plan declares
(sizing/plan.py) and the autoscaling check bin-packs against the node types of its Ray cluster
(sizing/autoscaling.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The prefix of the Ray resource that names a node's accelerator (ray_constants.RESOURCE_CONSTRAINT_PREFIX).
ACCELERATOR_RESOURCE_PREFIX = "accelerator_type:"
# What Ray Serve gives a replica that names no CPUs (ReplicaConfig), and Serve's default
# autoscaling bound for a deployment that sets none (AutoscalingConfig.max_replicas).
SERVE_DEFAULT_CPUS = 1.0
SERVE_DEFAULT_MAX_REPLICAS = 1
# The share of a node's accelerator-type resource each Serve LLM engine rank asks for.
LLM_ACCELERATOR_SHARE = 0.001
# Ray Serve LLM's deployments: the engine (one per LLM config) and the OpenAI ingress.
LLM_SERVER = "LLMServer"
LLM_INGRESS = "OpenAiIngress"

Bundle = Mapping[str, float]


@dataclass(frozen=True)
class Demand:
    """What one deployment or trainer asks Ray for at its maximum: ``count`` replicas (or worker
    groups), each a placement group of ``bundles`` with ``strategy`` (a plain actor: one bundle)."""

    key: str  # the config key that sets the count (where the config error points)
    who: str  # "deployment Generate", "trainer (Ray Train workers)"
    count: int
    unit: str  # "replicas", "workers"
    bundles: tuple[Bundle, ...]
    strategy: str = "PACK"


def bundle(**resources: float) -> dict[str, float]:
    return {k: v for k, v in resources.items() if v}


def llm_replica_bundles(tensor_parallel_size: int, accelerator_type: str | None) -> tuple[dict[str, float], ...]:
    """The placement group of one Serve LLM replica (vLLM engine): a GPU per rank, each with a
    share of the accelerator type when the config names one; the first bundle also holds the
    replica actor (1 CPU)."""
    rank = {"GPU": 1.0}
    if accelerator_type:
        rank[f"{ACCELERATOR_RESOURCE_PREFIX}{accelerator_type}"] = LLM_ACCELERATOR_SHARE
    first = {"CPU": SERVE_DEFAULT_CPUS, **rank}
    return (first, *(dict(rank) for _ in range(tensor_parallel_size - 1)))
