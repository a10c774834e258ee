"""The one seam between the CLI and the workload renderers: ``render(kind, config) -> dict``.

The workloads and their renderers come from the one registry, ``manifests/registry.py``, which
``python -m manifests render`` uses too, so ``submit`` applies exactly what the workload tests
validate against the KubeRay CRDs. The renderers import neither Ray nor torch (a test checks
it), so the CLI stays light.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from config.environment import EnvironmentConfig
from ops.errors import OpsError

Renderer = Callable[[EnvironmentConfig], dict[str, Any]]


def workloads() -> dict[str, str]:
    """``key -> KubeRay kind`` of every registered workload (manifests.registry)."""
    from manifests import registry

    return {w.key: w.kind for w in registry.workloads()}


def renderers() -> dict[str, Renderer | str]:
    """``key -> renderer`` (a function, or ``"module:function"``) of every registered workload."""
    from manifests import registry

    return {w.key: w.render for w in registry.workloads()}


def render(kind: str, config: EnvironmentConfig) -> dict[str, Any]:
    known = workloads()
    if kind not in known:
        raise OpsError(f"unknown workload {kind!r}; allowed: {', '.join(known)}")
    target = renderers().get(kind)
    if target is None:
        raise OpsError(
            f"no {kind} manifest renderer is registered (manifests.registry)",
            "merge the workload branch that provides it",
        )
    if callable(target):
        fn = target
    else:
        module_name, _, function = target.partition(":")
        try:
            fn = getattr(importlib.import_module(module_name), function)
        except (ImportError, AttributeError) as err:
            raise OpsError(f"the {kind} manifest renderer {target} cannot be loaded: {err}") from None
    manifest = fn(config)
    if manifest.get("kind") != known[kind] or not (manifest.get("metadata") or {}).get("name"):
        raise OpsError(
            f"the {kind} renderer returned a {manifest.get('kind')!r} without a name; expected a named {known[kind]}"
        )
    return manifest
