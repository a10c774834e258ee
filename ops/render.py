"""The one seam between the CLI and the workload renderers: ``render(kind, config) -> dict``.

The manifests come from ``workloads/`` through the same registry ``python -m manifests render``
uses (``manifests.__main__.RENDERERS``, ``kind -> "module:function"``), so ``submit`` applies
exactly what the workload tests validate against the KubeRay CRDs. The renderers import neither
Ray nor torch (a test checks it), so the CLI stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from config.environment import EnvironmentConfig
from ops.errors import OpsError

WORKLOADS = ("training", "inference")
EXPECTED_KIND = {"training": "RayJob", "inference": "RayService"}


def renderers() -> dict[str, str]:
    """``kind -> "module:function"``: the one registry, ``manifests.__main__.RENDERERS``."""
    from manifests.__main__ import RENDERERS

    return dict(RENDERERS)


def render(kind: str, config: EnvironmentConfig) -> dict[str, Any]:
    if kind not in WORKLOADS:
        raise OpsError(f"unknown workload {kind!r}; allowed: {', '.join(WORKLOADS)}")
    target = renderers().get(kind)
    if target is None:
        raise OpsError(
            f"no {kind} manifest renderer is registered (manifests.__main__.RENDERERS)",
            "merge the workload branch that provides it",
        )
    module_name, _, function = target.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError) as err:
        raise OpsError(f"the {kind} manifest renderer {target} cannot be loaded: {err}") from None
    manifest = fn(config)
    if manifest.get("kind") != EXPECTED_KIND[kind] or not (manifest.get("metadata") or {}).get("name"):
        raise OpsError(
            f"the {kind} renderer returned a {manifest.get('kind')!r} without a name; expected a named {EXPECTED_KIND[kind]}"
        )
    return manifest
