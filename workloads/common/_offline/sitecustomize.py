"""Keep local Ray processes on loopback: on PYTHONPATH of every process a local cluster starts.

Ray's usage library probes the cloud metadata service (169.254.169.254) and may report usage
even with RAY_USAGE_STATS_ENABLED=0. When ``ray._common.usage.usage_lib`` is imported, its
``get_cloud_from_metadata_requests`` and ``UsageReportClient.report_usage_data`` are replaced
with functions that send nothing. Nothing else is imported early, so startup stays cheap.
"""

import importlib.abc
import sys

_TARGET = "ray._common.usage.usage_lib"


def _patch(module):
    module.get_cloud_from_metadata_requests = lambda *a, **k: "unknown"
    client = getattr(module, "UsageReportClient", None)
    if client is not None:
        client.report_usage_data = lambda self, *a, **k: None


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def _exec(module, _orig=exec_module):
                    _orig(module)
                    _patch(module)

                spec.loader.exec_module = _exec
                return spec
        return None


if _TARGET in sys.modules:
    _patch(sys.modules[_TARGET])
else:
    sys.meta_path.insert(0, _Finder())
