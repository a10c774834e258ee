"""``python -m manifests render inference-disruption-budgets --env NAME``: the PodDisruptionBudgets
of every RayService the registry deploys (manifests/registry.py), each as ``ha.disruption_budgets``
writes them (its heads and its Serve worker pods)."""

from __future__ import annotations

from typing import Any

from config.environment import EnvironmentConfig
from manifests import ha, registry


def render_disruption_budgets(cfg: EnvironmentConfig) -> dict[str, Any]:
    """A v1 List of the budgets of every RayService of ``cfg``."""
    services = [(name, w.app) for w, name in registry.deployed(cfg) if w.kind == "RayService"]
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [b for n, app in services for b in ha.disruption_budgets(n, app)],
    }
