"""``submit``, by concern (its command line: ops/commands/submit.py): render.py (the workload
manifests), prepare.py (``submit job`` checked, packaged and rendered before any client), job.py
(the user job: name, zip, upload, placement, RayJob), runtime_env.py (``--runtime-env``),
follow.py (apply, then follow to the end), job_follow.py (following a user job) and progress.py
(the progress line from the job's status and log lines)."""
