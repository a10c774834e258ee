"""The command line of the job commands (``submit job``, ``jobs``, ``logs``, ``stop``, ``resume``,
``dashboard``): their options, and the glue from parsed arguments to ops/jobs.py and
ops/job_submit.py. ops/cli.py adds them to its parser and routes to ``run_job_command``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, TextIO

from config.environment import EnvironmentConfig
from ops.errors import EXIT_OK, OpsError
from ops.output import to_json

JOB_COMMANDS = ("jobs", "logs", "stop", "resume", "dashboard")


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """``submit job ... -- python train.py --lr 3`` -> (the CLI's own arguments, the job's command)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def _namespace(parser: argparse.ArgumentParser) -> None:
    from workloads.common.k8s import NAMESPACE

    parser.add_argument(
        "--namespace", "-n", metavar="NS", default=NAMESPACE, help="namespace of the jobs (default: %(default)s)"
    )


def add_submit_job_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("submit job (your own command, after --)")
    g.add_argument(
        "--working-dir", metavar="DIR", type=Path, help="directory to upload and run in (Ray's runtime_env working_dir)"
    )
    g.add_argument(
        "--name",
        metavar="NAME",
        help="job name (default: the directory's name and a random suffix); with --attach, the job to follow",
    )
    g.add_argument(
        "--image",
        metavar="URI",
        help="container image (default: training.image of the environment, else the environment's workloads image)",
    )
    g.add_argument(
        "--gpus", type=int, metavar="N", help="GPUs in total; rounded up to whole nodes of the instance group"
    )
    g.add_argument("--nodes", type=int, metavar="N", help="worker nodes (default 1), when --gpus is not given")
    g.add_argument(
        "--instance-group",
        metavar="NAME",
        help="HyperPod instance group of the workers (default: training.instance_group)",
    )
    g.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATTERN",
        help="leave files matching PATTERN out of the upload (repeatable; .git, __pycache__, .venv always are)",
    )
    g.add_argument(
        "--env-var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable of the job (repeatable)",
    )
    g.add_argument(
        "--namespace", "-n", metavar="NS", default=None, help="namespace to run in (default: the workloads namespace)"
    )


def add_job_commands(sub: Any, prog: str, common: Any, formatter: Any) -> None:
    def job_parser(name: str, help_: str, description: str, *, target: str | None) -> Any:
        """A job command: NAME (``target`` "required"/"optional"/None), the common and --namespace options."""
        p = sub.add_parser(name, prog=f"{prog} {name}", help=help_, formatter_class=formatter, description=description)
        if target == "required":
            p.add_argument("name", metavar="NAME", help="the RayJob")
        elif target == "optional":
            p.add_argument(
                "name", metavar="NAME", nargs="?", help="RayJob or RayService (default: the only running one)"
            )
        common(p, kube=True)
        _namespace(p)
        return p

    p = job_parser(
        "jobs",
        "list RayJobs",
        "List the RayJobs (newest first) with their KubeRay state, the Ray job's state, failed\n"
        "attempts and start/end times.",
        target=None,
    )
    p.add_argument("--all-namespaces", "-A", action="store_true", help="every namespace")
    p = job_parser(
        "logs",
        "print or follow a job's driver log",
        "Print the driver's log of a RayJob (the job's stdout and stderr), read from its Ray head's\n"
        "Jobs API through the Kubernetes API's port-forward. --follow prints what it adds until the\n"
        "job ends, and goes on to the next Ray job when KubeRay retries.",
        target="required",
    )
    p.add_argument("--follow", "-f", action="store_true", help="print new lines until the job ends")
    p.add_argument(
        "--tail", type=int, metavar="N", default=None, help="only the last N lines (of the first attempt shown)"
    )
    p = job_parser(
        "stop",
        "stop a job; checkpoints stay",
        "Stop a RayJob: KubeRay deletes its Ray cluster (the GPUs are free at once) and keeps the\n"
        "job as Suspended (spec.suspend); `resume` starts it again. --delete deletes the RayJob\n"
        "object instead. Either way the checkpoints on FSx and in S3 stay.",
        target="required",
    )
    p.add_argument("--delete", action="store_true", help="delete the RayJob instead of suspending it")
    job_parser(
        "resume",
        "restart a stopped job",
        "Resume a stopped (suspended) RayJob: KubeRay creates a new Ray cluster and submits the\n"
        "job again; a job that checkpoints resumes from its newest checkpoint.",
        target="required",
    )
    p = job_parser(
        "dashboard",
        "port-forward to a Ray head's dashboard",
        "Port-forward a local port to the Ray dashboard of a job's (or service's) head pod\n"
        "through the Kubernetes API and print the local URL (with the token where Ray's token\n"
        "authentication is on). Without NAME: the only running Ray cluster. Ctrl-C ends it.",
        target="optional",
    )
    p.add_argument(
        "--port", type=int, default=8265, metavar="PORT", help="local port (default: %(default)s; 0 picks a free one)"
    )

    p = sub.add_parser(
        "completion",
        prog=f"{prog} completion",
        help="print the shell completion script",
        formatter_class=formatter,
        description=f"Print a bash completion script for {prog}. Install it with\n"
        f"  {prog} completion bash > ~/.local/share/bash-completion/completions/{prog.split()[-1]}\n"
        f'or for the current shell:  eval "$({prog} completion bash)"\n'
        "zsh: run `autoload -U +X bashcompinit && bashcompinit` first.",
    )
    p.add_argument("shell", choices=["bash"], help="the shell")


def _env_vars(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise OpsError(f"--env-var {pair!r} is not KEY=VALUE", "e.g. --env-var WANDB_MODE=offline")
        out[key] = value
    return out


def run_job_command(
    config: EnvironmentConfig,
    aws: Any,
    args: argparse.Namespace,
    out: TextIO,
    kube_factory: Any,
    *,
    prog: str,
    sleep: Any = time.sleep,
    clock: Any = time.monotonic,
    token_fn: Any = None,
) -> int:
    from ops import jobs

    env = config.name
    if args.command == "submit":
        return _submit_job(config, aws, args, out, kube_factory, prog=prog, sleep=sleep, clock=clock, token_fn=token_fn)
    kube = kube_factory(aws, config, args)
    if args.command == "jobs":
        rows = jobs.list_jobs(kube, None if args.all_namespaces else args.namespace)
        print(to_json({"environment": env, "jobs": rows}) if args.json else jobs.render_jobs(rows), file=out)
        return EXIT_OK
    if args.command == "logs":
        return jobs.show_logs(
            kube,
            args.namespace,
            args.name,
            follow=args.follow,
            tail=args.tail,
            out=out,
            json_mode=args.json,
            prog=prog,
            env=env,
            sleep=sleep,
            token_fn=token_fn,
        )
    if args.command in ("stop", "resume"):
        result = (
            jobs.stop_job(kube, args.namespace, args.name, delete=args.delete, prog=prog, env=env)
            if args.command == "stop"
            else jobs.resume_job(kube, args.namespace, args.name, prog=prog, env=env)
        )
        print(to_json(result) if args.json else result["message"], file=out)
        return EXIT_OK
    from ops.portforward import serve_dashboard

    return serve_dashboard(
        kube,
        args.namespace,
        args.name,
        local_port=args.port,
        out=out,
        json_mode=args.json,
        prog=prog,
        env=env,
        token_fn=token_fn,
    )


def _submit_job(
    config: EnvironmentConfig,
    aws: Any,
    args: argparse.Namespace,
    out: TextIO,
    kube_factory: Any,
    *,
    prog: str,
    sleep: Any,
    clock: Any,
    token_fn: Any = None,
) -> int:
    from config.teams import team_of_namespace
    from ops import job_submit as js
    from ops.submit import apply, is_terminal
    from workloads.common.k8s import NAMESPACE

    namespace = args.namespace or NAMESPACE
    follower_args = {
        "env": config.name,
        "kind": "RayJob",
        "namespace": namespace,
        "poll_s": args.poll_seconds,
        "timeout_s": args.timeout_minutes * 60 if args.timeout_minutes else None,
        # A terminal gets the live display; a pipe or file gets JSON lines, as --json does.
        "json_mode": args.json or not is_terminal(out),
        "live": is_terminal(out),
        "out": out,
        "sleep": sleep,
        "clock": clock,
        "token_fn": token_fn,
    }
    if args.attach:
        if not args.name:
            raise OpsError(
                "--attach needs --name NAME for a job", f"list the jobs with: {prog} jobs --env {config.name}"
            )
        kube = kube_factory(aws, config, args)
        from ops.jobs import get_job

        get_job(kube, namespace, args.name, prog=prog, env=config.name)
        return js.JobFollower(kube, prog=prog, name=args.name, **follower_args).run()
    if args.working_dir is None:
        raise OpsError(
            "submit job needs --working-dir DIR",
            f"e.g. {prog} submit job --env {config.name} --working-dir . -- python train.py",
        )
    if not args.job_command:
        raise OpsError(
            "submit job needs the command to run after --",
            f"e.g. {prog} submit job --env {config.name} --working-dir . -- python train.py",
        )
    # Everything that can be wrong with the arguments is checked before anything is uploaded.
    name = js.job_name(args.working_dir, args.name)
    placement = js.placement(config, instance_group=args.instance_group, gpus=args.gpus, nodes=args.nodes)
    env_vars = _env_vars(args.env_var)
    package = js.package_working_dir(args.working_dir, excludes=tuple(args.exclude), top=name)
    bucket = config.bucket_names()["checkpoints"]
    # A team's job code goes under the team's prefix: its pods' role reads nothing else.
    team = team_of_namespace(list(config.teams), namespace)
    key = package.key(name, team.s3_prefix if team else "")
    uri = f"s3://{bucket}/{key}"
    manifest = js.render_job(
        config,
        name=name,
        command=args.job_command,
        working_dir_uri=uri,
        p=placement,
        image=args.image,
        env=env_vars,
        team=team,
    )
    manifest["metadata"]["namespace"] = namespace
    kube = kube_factory(aws, config, args)
    follower = js.JobFollower(kube, prog=prog, name=name, **follower_args)
    uploaded = js.upload(aws, bucket, key, package)
    follower.emit(
        f"{'uploaded' if uploaded else 'reusing'} {args.working_dir} ({package.files} files, {len(package.data) >> 10} KiB) as {uri}",
        event="uploaded",
        uri=uri,
        files=package.files,
        bytes=len(package.data),
    )
    follower.emit(
        f"job {name}: {placement.nodes} x {placement.instance_type} ({placement.nodes * placement.gpus_per_node} GPUs) "
        f"in {namespace}; checkpoints: {js.checkpoint_dir(config, name, team)} (env HPRAY_CHECKPOINT_DIR)",
        event="job",
        name=name,
        nodes=placement.nodes,
        gpus=placement.nodes * placement.gpus_per_node,
    )
    apply(kube, manifest, follower.emit)
    if args.no_follow:
        follower.emit(
            f"not following; watch it with: {prog} submit job --env {config.name} --attach --name {name}  "
            f"(or {prog} logs {name} --env {config.name} --follow)"
        )
        return EXIT_OK
    return follower.run()
