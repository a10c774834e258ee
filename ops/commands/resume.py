"""``resume NAME``: restart a stopped (suspended) RayJob from its checkpoints: ops/jobs/control.py."""

from __future__ import annotations

from typing import Any

from ops.context import Command, CommandSpec
from ops.errors import EXIT_OK
from ops.output import to_json
from ops.usage import CommandLine


def register(sub: Any, cli: CommandLine) -> None:
    cli.job_parser(
        sub,
        "resume",
        "restart a stopped job",
        "Resume a stopped (suspended) RayJob: KubeRay creates a new Ray cluster and submits the\n"
        "job again; a job that checkpoints resumes from its newest checkpoint.",
        target="required",
        examples=["resume NAME --env dev"],
    )


def run(command: Command) -> int:
    from ops.jobs import control

    args = command.args
    kube = command.kube()
    result = control.resume_job(kube, args.namespace, args.name, prog=command.prog, env=command.env)
    print(to_json(result) if args.json else result["message"], file=command.out)
    return EXIT_OK


COMMAND = CommandSpec("resume", register, run=run)
