"""Where ``hpray submit job`` puts an ML engineer's code: one fact shared by the CLI (which uploads
there) and the CDK app (whose workloads role may read there, constructs/workloads_access.py)."""

from __future__ import annotations

# Prefix in the checkpoint bucket: jobs/<job name>/working-dir-<content hash>.zip. Ray pods
# download the zip as their runtime_env working_dir; nothing in the cluster writes here.
JOBS_PREFIX = "jobs/"

# Value of the workload label (manifests/security.py WORKLOAD_LABEL) on every pod of every
# ``submit job`` RayJob: the namespace's NetworkPolicies (manifests/network_policy.py) are
# rendered at deploy time for fixed workload names, and users' jobs get names at submit time, so
# they share one workload: a user job's pods reach each other and the pods of other user jobs in
# the namespace, not the platform's training job or services.
JOBS_WORKLOAD = "user-jobs"
