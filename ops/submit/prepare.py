"""``submit job`` worked out before any client is made: the checks of its arguments, the working
directory packaged and the RayJob rendered (``prepare_job``, also the whole of ``--dry-run``), with
ops/submit/job.py and ops/submit/runtime_env.py. Its options and run: ops/commands/submit.py."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.environment import EnvironmentConfig
from ops.errors import UsageError

# What a job's containers name until the submit reads the deployed image from the cluster.
PENDING_IMAGE = "pending/the-deployed-workloads-image"


def _env_vars(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--env-var {pair!r} is not KEY=VALUE", "e.g. --env-var WANDB_MODE=offline")
        out[key] = value
    return out


@dataclass(frozen=True)
class PreparedJob:
    """A ``submit job`` worked out locally: what it uploads, where, and the RayJob it applies."""

    name: str
    namespace: str
    working_dir: Path
    placement: Any
    package: Any
    bucket: str
    key: str
    manifest: dict[str, Any]
    checkpoints: str
    # The image named by --image or training.image; None: the environment's deployed one, set at submit.
    image: str | None = None

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def prepare_job(config: EnvironmentConfig, args: argparse.Namespace, prog: str) -> PreparedJob | None:
    """Everything that can be wrong with ``submit job``'s arguments, checked before any client is
    made (exit 2); the working directory packaged and the RayJob rendered. None with --attach."""
    from config.teams import team_of_namespace
    from manifests.k8s import NAMESPACE
    from ops.submit import job as js
    from ops.submit import runtime_env

    example = f"e.g. {prog} submit job --env {config.name} --working-dir . -- python train.py"
    if args.attach:
        if not args.name:
            raise UsageError(
                "--attach needs --name NAME for a job", f"list the jobs with: {prog} jobs --env {config.name}"
            )
        return None
    if args.runtime_env and args.runtime_env_json:
        raise UsageError("--runtime-env and --runtime-env-json exclude each other", "give the runtime env once")
    if args.runtime_env_json:
        env_file = runtime_env.load_json(args.runtime_env_json)
    else:
        env_file = runtime_env.load(args.runtime_env) if args.runtime_env else runtime_env.RuntimeEnvFile()
    limit = config.training.active_deadline_seconds
    if args.deadline is not None and not 60 <= args.deadline <= limit:
        raise UsageError(
            f"--deadline {args.deadline}: allowed 60 to {limit} seconds (training.active_deadline_seconds of "
            f"{config.name}.yaml is the most a job may run)",
            "ask for less, or have the environment's training.active_deadline_seconds raised",
        )
    if args.working_dir and env_file.working_dir and args.working_dir.resolve() != env_file.working_dir.resolve():
        raise UsageError(
            f"--working-dir {args.working_dir} and the runtime env's working_dir {env_file.working_dir} differ",
            "give the directory once",
        )
    working_dir = args.working_dir or env_file.working_dir
    if working_dir is None:
        raise UsageError("submit job needs --working-dir DIR", example)
    if not args.job_command:
        raise UsageError("submit job needs the command to run after --", example)
    name = js.job_name(working_dir, args.name)
    placement = js.placement(config, instance_group=args.instance_group, gpus=args.gpus, nodes=args.nodes)
    env_vars = {**env_file.env_vars, **_env_vars(args.env_var)}
    package = js.package_working_dir(working_dir, excludes=(*env_file.excludes, *args.exclude), top=name)
    namespace = args.namespace or NAMESPACE
    bucket = config.bucket_names()["checkpoints"]
    # A team's job code goes under the team's prefix: its pods' role reads nothing else.
    team = team_of_namespace(list(config.teams), namespace)
    key = package.key(name, team.s3_prefix if team else "")
    named = args.image or config.training.image
    manifest = js.render_job(
        config,
        name=name,
        command=args.job_command,
        working_dir_uri=f"s3://{bucket}/{key}",
        p=placement,
        # A dry run shows the checkout's image; a submit sets the deployed one (run_submit_job).
        image=named or (None if getattr(args, "dry_run", False) else PENDING_IMAGE),
        env=env_vars,
        team=team,
        runtime_env=env_file.fields,
        deadline_s=args.deadline,
    )
    manifest["metadata"]["namespace"] = namespace
    return PreparedJob(
        name,
        namespace,
        working_dir,
        placement,
        package,
        bucket,
        key,
        manifest,
        js.checkpoint_dir(config, name, team),
        named,
    )


def job_dry_run_comments(job: PreparedJob) -> list[str]:
    p = job.placement
    return [
        f"dry run: RayJob {job.namespace}/{job.name} is not applied, nothing is uploaded",
        f"working dir: {job.working_dir} ({job.package.files} files, {len(job.package.data) >> 10} KiB) -> {job.uri}",
        f"workers: {p.nodes} x {p.instance_type} ({p.nodes * p.gpus_per_node} GPUs); checkpoints: {job.checkpoints}",
        f"deadline: {job.manifest['spec'].get('activeDeadlineSeconds')} s (activeDeadlineSeconds)",
    ]
