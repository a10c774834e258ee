"""The one seam between the CLI and the workload renderers: ``render(kind, config) -> dict``.

The manifests come from ``workloads/`` (the same renderer as ``python -m workloads render``), so
``submit`` applies exactly what the tests validate against the KubeRay CRDs.
"""

from __future__ import annotations

import importlib
from typing import Any

from config.model import EnvironmentConfig
from ops.errors import OpsError

WORKLOADS = ("training", "inference")
# Where each renderer lives (module, function); each function takes the EnvironmentConfig.
RENDERERS = {
    "training": ("workloads.training.manifest", "render_rayjob"),
    "inference": ("workloads.inference.manifest", "render_rayservice"),
}
EXPECTED_KIND = {"training": "RayJob", "inference": "RayService"}


def render(kind: str, config: EnvironmentConfig) -> dict[str, Any]:
    if kind not in RENDERERS:
        raise OpsError(f"unknown workload {kind!r}; allowed: {', '.join(WORKLOADS)}")
    module_name, function = RENDERERS[kind]
    try:
        module = importlib.import_module(module_name)
        fn = getattr(module, function)
    except (ImportError, AttributeError) as err:
        raise OpsError(
            f"the {kind} manifest renderer {module_name}.{function} is not available: {err}",
            "merge the workload branch that provides it",
        ) from None
    manifest = fn(config)
    if manifest.get("kind") != EXPECTED_KIND[kind] or not (manifest.get("metadata") or {}).get("name"):
        raise OpsError(f"the {kind} renderer returned a {manifest.get('kind')!r} without a name; expected a named {EXPECTED_KIND[kind]}")
    return manifest
