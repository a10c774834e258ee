"""Keep local Ray processes on loopback: on PYTHONPATH of every process a local cluster starts.

Ray turns a 127.0.0.1 cluster address into "this node's IP" (``resolve_ip_for_localhost``), found
by ``node_ip_address_from_perspective``: on a Linux host that is the host's network interface, so
drivers, workers and the GCS would talk over it instead of loopback. When
``ray._private.services`` is imported, that function is replaced by one that answers 127.0.0.1.
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` would do the same, but it also makes ``ray start
--address`` refuse to add worker nodes.)

Ray's usage library probes the cloud metadata service (169.254.169.254) and may report usage
even with RAY_USAGE_STATS_ENABLED=0. When ``ray._common.usage.usage_lib`` is imported, its
``get_cloud_from_metadata_requests`` and ``UsageReportClient.report_usage_data`` are replaced
with functions that send nothing. Nothing else is imported early, so startup stays cheap.
"""

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


def _patch_usage(module: Any) -> None:
    module.get_cloud_from_metadata_requests = lambda *a, **k: "unknown"
    client = getattr(module, "UsageReportClient", None)
    if client is not None:
        client.report_usage_data = lambda self, *a, **k: None


def _patch_services(module: Any) -> None:
    module.node_ip_address_from_perspective = lambda *a, **k: "127.0.0.1"


_PATCHES = {"ray._common.usage.usage_lib": _patch_usage, "ray._private.services": _patch_services}


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def _exec(module: ModuleType, _orig: Any = exec_module, _patch: Any = patch) -> None:
                    _orig(module)
                    _patch(module)

                spec.loader.exec_module = _exec  # type: ignore[method-assign]
                return spec
        return None


_pending = False
for _name, _fn in _PATCHES.items():
    if _name in sys.modules:
        _fn(sys.modules[_name])
    else:
        _pending = True
if _pending:
    sys.meta_path.insert(0, _Finder())
