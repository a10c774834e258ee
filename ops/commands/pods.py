"""``pods NAME``: one job's pods, their phase, readiness, restarts and node (ops/jobs/inspection.py)."""

from __future__ import annotations

from typing import Any

from ops.context import Command, CommandSpec
from ops.errors import EXIT_OK
from ops.output import to_json
from ops.usage import CommandLine


def register(sub: Any, cli: CommandLine) -> None:
    cli.job_parser(
        sub,
        "pods",
        "list one job's pods",
        "List the pods of a RayJob's Ray cluster (head and workers) with their phase, readiness,\n"
        "restarts, node and age. `logs NAME --pod POD` prints one of them.",
        target="required",
        examples=["pods NAME --env dev"],
    )


def run(command: Command) -> int:
    from ops.jobs import inspection

    args = command.args
    kube = command.kube()
    report = inspection.job_pods(kube, args.namespace, args.name, prog=command.prog, env=command.env)
    print(to_json(report) if args.json else inspection.render_pods(report), file=command.out)
    return EXIT_OK


COMMAND = CommandSpec("pods", register, run=run)
