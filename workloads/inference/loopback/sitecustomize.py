"""Loaded by every Python process of a local Ray cluster (this directory is put on PYTHONPATH).

Ray 2.60's dashboard and usage code probe cloud metadata (169.254.169.254) even with usage stats
off; local clusters must not send traffic off 127.0.0.1, so both calls become no-ops here.
"""

try:
    from ray._common.usage import usage_lib as _usage_lib

    _usage_lib.get_cloud_from_metadata_requests = lambda: "unknown"
    _usage_lib.UsageReportClient.report_usage_data = lambda self, url, data: None
except Exception:  # noqa: BLE001 - not a Ray process, or Ray moved the module: nothing to stub
    pass
