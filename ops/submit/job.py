"""``submit job``: an ML engineer's own script on the environment's Ray cluster.

1. The working directory is zipped (one top-level directory, files in sorted order with fixed
   timestamps, so the same code gives the same bytes) and uploaded to the checkpoint bucket at
   ``jobs/<job>/working-dir-<sha256>.zip`` (config/facts/jobs.py), which the workloads role may read.
2. A RayJob runs the command with that zip as Ray's runtime_env ``working_dir``: every Ray pod
   downloads it with its Pod Identity credentials, and the driver starts in it.
3. The job is followed like ``submit training``: state changes, steps, loss, ETA, checkpoints,
   resumes; and, while pods wait, the scheduler's reason when one cannot be placed
   (ops/submit/job_follow.py).

Packaging, placement and rendering share the job's name, placement and config.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import math
import os
import re
import secrets
import shlex
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from config.environment import EnvironmentConfig
from config.facts.jobs import JOBS_PREFIX, JOBS_WORKLOAD
from ops.errors import AccessDeniedError, AwsError, NotFoundError, OpsError, UsageError

if TYPE_CHECKING:
    from config.teams import Team
    from sizing.pods import WorkerShape

# Left out of every upload: version control, caches and virtual environments are never code the
# job needs, and they can be large. Any directory with a pyvenv.cfg (venv, virtualenv: .venv-checkov
# too) or conda-meta/ (conda) is an environment, whatever its name.
DEFAULT_EXCLUDES = (
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    "*.pyc",
    ".venv",
    "venv",
    "node_modules",
    ".ipynb_checkpoints",
    ".DS_Store",
)
ENV_MARKERS = ("pyvenv.cfg", "conda-meta")
# Code, not data: a larger directory almost always holds data the job should read from S3/FSx.
MAX_ZIP_BYTES = 256 << 20
# RayJob names: KubeRay derives the RayCluster (name + 6 chars) and its head Service
# (cluster + "-head-svc") from it, and a Service name has at most 63 characters.
MAX_NAME = 40
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_JOB = "hpray.io/job"
LABEL_KIND = "hpray.io/kind"
APP = "ray-job"
# Environment of every Ray process of the job (the training workload's, for the same reasons).
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_TRAIN_V2_ENABLED": "1"}


def job_name(working_dir: Path, name: str | None) -> str:
    """``--name``, checked; else the directory's name and a random suffix (always unique)."""
    if name is not None:
        if len(name) > MAX_NAME or not NAME_RE.match(name):
            raise UsageError(
                f"--name {name!r} is not a valid job name",
                f"use 1-{MAX_NAME} lowercase letters, digits and hyphens, starting with a letter and ending with a letter or digit",
            )
        return name
    stem = re.sub(r"[^a-z0-9]+", "-", working_dir.resolve().name.lower()).strip("-") or "job"
    if not stem[0].isalpha():
        stem = "job-" + stem
    return f"{stem[: MAX_NAME - 7].rstrip('-')}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Package:
    data: bytes
    sha256: str
    files: int

    def key(self, job: str, prefix: str = "") -> str:
        """Where the package goes: ``prefix`` (a team's prefix of the bucket, or the bucket's top)
        then jobs/<job>/."""
        return f"{prefix}{JOBS_PREFIX}{job}/working-dir-{self.sha256[:16]}.zip"


def _excluded(rel: str, patterns: tuple[str, ...]) -> bool:
    parts = rel.split("/")
    return any(fnmatch.fnmatch(part, p) for p in patterns for part in parts) or any(
        fnmatch.fnmatch(rel, p) for p in patterns
    )


def package_working_dir(working_dir: Path, *, excludes: tuple[str, ...] = (), top: str = "job") -> Package:
    """The directory as a zip with one top-level directory ``top`` (Ray strips it when it unpacks
    a remote working_dir), deterministic for the same files."""
    root = Path(working_dir)
    if not root.is_dir():
        raise UsageError(
            f"--working-dir {str(working_dir)!r} is not a directory", "pass the directory that holds your script"
        )
    patterns = DEFAULT_EXCLUDES + tuple(excludes)
    paths: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not _excluded(f"{rel_dir}/{d}".lstrip("./") if rel_dir != "." else d, patterns)
            and not any((Path(dirpath) / d / marker).exists() for marker in ENV_MARKERS)
        )
        for f in filenames:
            rel = f if rel_dir == "." else f"{rel_dir}/{f}"
            if not _excluded(rel, patterns):
                paths.append((rel, Path(dirpath) / f))
    if not paths:
        raise UsageError(
            f"--working-dir {str(working_dir)!r} has no files to upload (after excludes)",
            "pass the directory that holds your script",
        )
    buf = io.BytesIO()
    total = 0
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, path in sorted(paths):
            total += path.stat().st_size
            if total > MAX_ZIP_BYTES:
                raise UsageError(
                    f"--working-dir {str(working_dir)!r} holds more than {MAX_ZIP_BYTES >> 20} MiB of files (at {rel})",
                    "keep data out of the working directory (read it from S3 or /fsx), or leave it out with --exclude PATTERN",
                )
            info = zipfile.ZipInfo(f"{top}/{rel}", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if os.access(path, os.X_OK) else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    data = buf.getvalue()
    return Package(data=data, sha256=hashlib.sha256(data).hexdigest(), files=len(paths))


def upload(aws: Any, bucket: str, key: str, package: Package) -> bool:
    """Put the zip unless the same object is already there; True when it was uploaded. The
    bucket's default encryption (SSE-KMS) applies."""
    try:
        head = aws.call("s3", "head_object", Bucket=bucket, Key=key)
        if head.get("Metadata", {}).get("sha256") == package.sha256:
            return False
    except (NotFoundError, AccessDeniedError):
        pass  # no such object; or no read access to check it (the put then says what is missing)
    except AwsError as err:
        if "404" not in err.message:  # S3 answers a missing key's HEAD with a bare 404
            raise
    aws.call(
        "s3",
        "put_object",
        Bucket=bucket,
        Key=key,
        Body=package.data,
        Metadata={"sha256": package.sha256},
        ContentType="application/zip",
    )
    return True


@dataclass(frozen=True)
class JobPlacement:
    group: str
    instance_type: str
    nodes: int
    gpus_per_node: int
    efa_interfaces: int
    vcpus: int
    memory_gib: int


def placement(
    config: EnvironmentConfig, *, instance_group: str | None, gpus: int | None, nodes: int | None
) -> JobPlacement:
    """Whole nodes of one HyperPod instance group: ``--nodes``, or enough nodes for ``--gpus``."""
    from config import catalog
    from config.hyperpod import default_gpu_group

    groups = config.hyperpod.instance_groups
    name = instance_group or config.training.instance_group or (default_gpu_group(groups) or groups[0]).name
    group = next((g for g in groups if g.name == name), None)
    if group is None:
        raise UsageError(
            f"--instance-group {name!r} is not a HyperPod instance group of {config.name}",
            f"use one of: {', '.join(g.name for g in groups)}",
        )
    spec = catalog.instance_spec(group.instance_type)
    if gpus is not None:
        if gpus > 0 and not spec.gpus:
            raise UsageError(
                f"--gpus {gpus}: instance group {group.name!r} ({group.instance_type}) has no GPUs",
                "pick a GPU instance group with --instance-group",
            )
        needed = max(1, math.ceil(gpus / spec.gpus)) if spec.gpus else 1
        if nodes is not None and nodes != needed:
            raise UsageError(
                f"--gpus {gpus} needs {needed} {group.instance_type} node(s) ({spec.gpus} GPUs each), not --nodes {nodes}",
                "give --gpus or --nodes, not both",
            )
        nodes = needed
    nodes = nodes or 1
    if nodes > group.instance_count:
        raise UsageError(
            f"the job needs {nodes} {group.instance_type} node(s) ({spec.gpus} GPUs each), but instance group "
            f"{group.name!r} has {group.instance_count}",
            f"ask at most {group.instance_count * spec.gpus} GPUs / {group.instance_count} nodes",
        )
    return JobPlacement(
        group.name, group.instance_type, nodes, spec.gpus, spec.efa_interfaces, spec.vcpus, spec.memory_gib
    )


def checkpoint_dir(config: EnvironmentConfig, job: str, team: Team | None = None) -> str:
    """Where the job should keep its checkpoints, so they outlive the job and `stop`: FSx (mounted
    at /fsx in every Ray pod of the workloads' namespace), under the directory linked to the
    checkpoint bucket; for a team's job, the team's prefix of the checkpoint bucket (team
    namespaces do not mount the shared file system, constructs/team_access.py)."""
    if team is not None:
        return f"s3://{config.bucket_names()['checkpoints']}/{team.s3_prefix}checkpoints/{job}"
    return f"/fsx{config.fsx.file_system_path}/jobs/{job}"


def _without_fsx(pod_template: dict[str, Any]) -> None:
    """Drop the /fsx claim from a pod template (a team's job: its namespace has no such claim)."""
    spec = pod_template["spec"]
    spec["volumes"] = [v for v in spec.get("volumes", []) if "persistentVolumeClaim" not in v]
    kept = {v["name"] for v in spec["volumes"]}
    for c in spec.get("containers", []):
        c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if m["name"] in kept]


def render_job(
    config: EnvironmentConfig,
    *,
    name: str,
    command: list[str],
    working_dir_uri: str,
    p: JobPlacement,
    image: str | None = None,
    env: dict[str, str] | None = None,
    team: Team | None = None,
    runtime_env: dict[str, Any] | None = None,
    deadline_s: int | None = None,
) -> dict[str, Any]:
    """The ray.io/v1 RayJob for a user's command, on whole nodes of one instance group; for
    ``team``'s namespace, without the /fsx claim and with its checkpoints under the team's prefix.
    ``runtime_env``: more of Ray's runtime_env fields (pip, conda, ...: ops/submit/runtime_env.py)."""
    from manifests import image as image_mod
    from manifests import k8s, rayjob

    if not command:
        raise OpsError(
            "no command to run", "put it after --, e.g. hpray submit job --env dev --working-dir . -- python train.py"
        )
    # The workloads image (Ray, torch, this code), as the RayJob/RayService run it; never a bare Ray image.
    image = image or image_mod.resolve(config, config.training.image, "training.image")
    group = config.hyperpod.group(p.group)
    job_env = {**RAY_ENV, "HPRAY_JOB": name, "HPRAY_CHECKPOINT_DIR": checkpoint_dir(config, name, team), **(env or {})}
    # The runtime env agent of every pod downloads the working_dir with boto3: it needs the region
    # (Pod Identity gives credentials only).
    pod_env = k8s.env_list({**RAY_ENV, "AWS_REGION": config.region, "AWS_DEFAULT_REGION": config.region})
    meta = k8s.metadata(name, APP)
    meta["labels"] = {**meta["labels"], LABEL_JOB: name, LABEL_KIND: "job"}
    head = k8s.head_group(image, app=APP, env=pod_env)
    worker = k8s.worker_group(
        _worker_shape(config, p), group_name=group.name, image=image, app=APP, taints=group.taints, env=pod_env
    )
    if team is not None:
        _without_fsx(head["template"])
        _without_fsx(worker["template"])
    return rayjob.ray_job(
        metadata=meta,
        entrypoint=shlex.join(command),
        runtime_env_yaml=_json(
            {**(runtime_env or {}), "working_dir": working_dir_uri, "env_vars": dict(sorted(job_env.items()))}
        ),
        head=head,
        workers=[worker],
        workload=JOBS_WORKLOAD,
        token_auth=config.eks.ray_token_auth,
        # --deadline, at most the environment's (prepare.py checks it).
        active_deadline_s=deadline_s or config.training.active_deadline_seconds,
        ttl_s=config.training.ttl_seconds_after_finished,
        # `stop` suspends a user's job.
        suspendable=True,
    )


def _worker_shape(config: EnvironmentConfig, p: JobPlacement) -> WorkerShape:
    """One worker pod per node with all its GPUs and EFA interfaces and what the node has left
    once its DaemonSets run (the environment's plan; sizing/placement.py checks that teams' quotas hold one)."""
    from manifests import registry

    return registry.plan_of(config).job_worker(p.group, p.nodes)


def _json(value: Any) -> str:
    import json

    return json.dumps(value, indent=2, sort_keys=True)
