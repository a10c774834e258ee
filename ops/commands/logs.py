"""``logs NAME``: print or follow a job's driver log (ops/jobs/control.py), one pod's log
(``--pod``), or write them all into a folder (``--output-dir``; both ops/jobs/inspection.py)."""

from __future__ import annotations

import argparse
from typing import Any

from config.environment import EnvironmentConfig
from ops.context import Command, CommandSpec
from ops.errors import UsageError
from ops.usage import CommandLine, positive_int


def register(sub: Any, cli: CommandLine) -> None:
    p = cli.job_parser(
        sub,
        "logs",
        "print or follow a job's driver log, a pod's log, or download them all",
        "Print the driver's log of a RayJob (the job's stdout and stderr), read from its Ray head's\n"
        "Jobs API through the Kubernetes API's port-forward. --follow prints what it adds until the\n"
        "job ends, and goes on to the next Ray job when KubeRay retries.\n"
        "--pod POD prints one pod's log instead (`pods NAME` lists them); --output-dir DIR writes the\n"
        "driver's log and every pod's logs (the previous container's too) into DIR/NAME/.",
        target="required",
        examples=[
            "logs NAME --env dev --follow",
            "logs NAME --env dev --pod NAME-x7k2p-head-abcde --tail 100",
            "logs NAME --env dev --output-dir ./logs",
        ],
    )
    p.add_argument("--follow", "-f", action="store_true", help="print new lines until the job (or pod) ends")
    p.add_argument(
        "--tail",
        type=positive_int,
        metavar="N",
        default=None,
        help="only the last N lines (of the first attempt shown)",
    )
    p.add_argument("--pod", metavar="POD", help="one pod's log instead of the driver's (see `pods NAME`)")
    p.add_argument("--container", "-c", metavar="NAME", help="with --pod: the container (default: the pod's first)")
    p.add_argument("--previous", action="store_true", help="with --pod: the log of the container's previous run")
    p.add_argument("--output-dir", metavar="DIR", help="write the driver's and every pod's logs into DIR/NAME/")


def check(config: EnvironmentConfig, args: argparse.Namespace, prog: str) -> None:
    """What argparse cannot see: options that exclude each other or need another (exit 2)."""
    if not args.pod and (args.container or args.previous):
        given = "--container" if args.container else "--previous"
        raise UsageError(
            f"{given} is for one pod's log: it needs --pod POD",
            f"list the pods with: {prog} pods {args.name} --env {args.env}",
        )
    if args.output_dir is not None:
        other = next(
            (o for o, on in (("--follow", args.follow), ("--pod", args.pod), ("--tail", args.tail)) if on), None
        )
        if other:
            raise UsageError(
                f"--output-dir writes every log of the job; it does not take {other}", f"leave out {other}"
            )
        from pathlib import Path

        if Path(args.output_dir).exists() and not Path(args.output_dir).is_dir():
            raise UsageError(f"--output-dir {args.output_dir}: not a directory", "name a directory (it is created)")


def run(command: Command) -> int:
    from ops.jobs import control, inspection

    args, out, prog, env = command.args, command.out, command.prog, command.env
    kube = command.kube()
    # A RayService has no driver: its log is its head's (the Serve controller and proxy), as `kubectl logs`.
    pod = args.pod or (
        None
        if args.output_dir is not None
        else inspection.service_head_pod(kube, args.namespace, args.name, prog=prog, env=env)
    )
    if pod:
        return inspection.pod_log(
            kube,
            args.namespace,
            args.name,
            pod,
            container=args.container,
            previous=args.previous,
            tail=args.tail,
            follow=args.follow,
            out=out,
            prog=prog,
            env=env,
        )
    if args.output_dir is not None:
        return inspection.download_logs(
            kube, args.namespace, args.name, args.output_dir, out=out, prog=prog, env=env, token_fn=command.token_fn
        )
    return control.show_logs(
        kube,
        args.namespace,
        args.name,
        follow=args.follow,
        tail=args.tail,
        out=out,
        json_mode=args.json,
        prog=prog,
        env=env,
        sleep=command.sleep,
        token_fn=command.token_fn,
    )


COMMAND = CommandSpec("logs", register, run=run, check=check)
