"""``submit job``: its options, the checks and packaging done before any client is made
(``prepare_job``, also the whole of ``--dry-run``), and the glue to ops/job_submit.py. The other
job commands' command line is ops/jobs_cli.py."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.environment import EnvironmentConfig
from ops.context import Command
from ops.errors import EXIT_OK, UsageError
from ops.usage import positive_int


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """``submit job ... -- python train.py --lr 3`` -> (the CLI's own arguments, the job's command)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def add_submit_job_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--working-dir", metavar="DIR", type=Path, help="directory to upload and run in (Ray's runtime_env working_dir)"
    )
    p.add_argument(
        "--name",
        metavar="NAME",
        help="job name (default: the directory's name and a random suffix); with --attach, the job to follow",
    )
    p.add_argument(
        "--image",
        metavar="URI",
        help="container image (default: training.image of the environment, else the environment's workloads image)",
    )
    p.add_argument(
        "--gpus", type=positive_int, metavar="N", help="GPUs in total; rounded up to whole nodes of the instance group"
    )
    p.add_argument("--nodes", type=positive_int, metavar="N", help="worker nodes (default 1), when --gpus is not given")
    p.add_argument(
        "--instance-group",
        metavar="NAME",
        help="HyperPod instance group of the workers (default: training.instance_group)",
    )
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATTERN",
        help="leave files matching PATTERN out of the upload (repeatable; .git, __pycache__ and every "
        "virtualenv or conda env always are)",
    )
    p.add_argument(
        "--env-var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable of the job (repeatable; wins over the runtime env file's env_vars)",
    )
    p.add_argument(
        "--runtime-env",
        metavar="FILE",
        type=Path,
        help="Ray runtime_env from a YAML or JSON file (pip, uv, conda, env_vars, py_modules, config, ...)",
    )
    p.add_argument(
        "--namespace", "-n", metavar="NS", default=None, help="namespace to run in (default: the workloads namespace)"
    )


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

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def prepare_job(config: EnvironmentConfig, args: argparse.Namespace, prog: str) -> PreparedJob | None:
    """Everything that can be wrong with ``submit job``'s arguments, checked before any client is
    made (exit 2); the working directory packaged and the RayJob rendered. None with --attach."""
    from config.teams import team_of_namespace
    from manifests.k8s import NAMESPACE
    from ops import job_submit as js
    from ops import runtime_env

    example = f"e.g. {prog} submit job --env {config.name} --working-dir . -- python train.py"
    if args.attach:
        if not args.name:
            raise UsageError(
                "--attach needs --name NAME for a job", f"list the jobs with: {prog} jobs --env {config.name}"
            )
        return None
    env_file = runtime_env.load(args.runtime_env) if args.runtime_env else runtime_env.RuntimeEnvFile()
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
    manifest = js.render_job(
        config,
        name=name,
        command=args.job_command,
        working_dir_uri=f"s3://{bucket}/{key}",
        p=placement,
        image=args.image,
        env=env_vars,
        team=team,
        runtime_env=env_file.fields,
    )
    manifest["metadata"]["namespace"] = namespace
    return PreparedJob(
        name, namespace, working_dir, placement, package, bucket, key, manifest, js.checkpoint_dir(config, name, team)
    )


def job_dry_run_comments(job: PreparedJob) -> list[str]:
    p = job.placement
    return [
        f"dry run: RayJob {job.namespace}/{job.name} is not applied, nothing is uploaded",
        f"working dir: {job.working_dir} ({job.package.files} files, {len(job.package.data) >> 10} KiB) -> {job.uri}",
        f"workers: {p.nodes} x {p.instance_type} ({p.nodes * p.gpus_per_node} GPUs); checkpoints: {job.checkpoints}",
    ]


def run_submit_job(command: Command) -> int:
    from manifests.k8s import NAMESPACE
    from ops import job_submit as js
    from ops.job_follow import JobFollower
    from ops.submit import Target, apply

    config, args, prog = command.config, command.args, command.prog
    options = command.follow_options()
    job: PreparedJob | None = args.prepared

    def target(namespace: str, name: str) -> Target:
        return Target(workload="job", env=config.name, kind="RayJob", namespace=namespace, name=name)

    if job is None:  # --attach
        namespace = args.namespace or NAMESPACE
        kube = command.kube()
        from ops.jobs import get_job

        get_job(kube, namespace, args.name, prog=prog, env=config.name)
        return JobFollower(kube, target(namespace, args.name), options, prog=prog).run()
    kube = command.kube()
    follower = JobFollower(kube, target(job.namespace, job.name), options, prog=prog)
    package, placement = job.package, job.placement
    uploaded = js.upload(command.aws, job.bucket, job.key, package)
    follower.emit(
        f"{'uploaded' if uploaded else 'reusing'} {job.working_dir} ({package.files} files, {len(package.data) >> 10} KiB) as {job.uri}",
        event="uploaded",
        uri=job.uri,
        files=package.files,
        bytes=len(package.data),
    )
    follower.emit(
        f"job {job.name}: {placement.nodes} x {placement.instance_type} ({placement.nodes * placement.gpus_per_node} GPUs) "
        f"in {job.namespace}; checkpoints: {job.checkpoints} (env HPRAY_CHECKPOINT_DIR)",
        event="job",
        name=job.name,
        nodes=placement.nodes,
        gpus=placement.nodes * placement.gpus_per_node,
    )
    apply(kube, job.manifest, follower.emit)
    if args.no_follow:
        follower.emit(
            f"not following; watch it with: {prog} submit job --env {config.name} --attach --name {job.name}  "
            f"(or {prog} logs {job.name} --env {config.name} --follow)"
        )
        return EXIT_OK
    return follower.run()
