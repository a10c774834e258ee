"""Where ``hpray submit job`` puts an ML engineer's code: one fact shared by the CLI (which uploads
there) and the CDK app (whose workloads role may read there, constructs/workloads_access.py)."""

from __future__ import annotations

# Prefix in the checkpoint bucket: jobs/<job name>/working-dir-<content hash>.zip. Ray pods
# download the zip as their runtime_env working_dir; nothing in the cluster writes here.
JOBS_PREFIX = "jobs/"
