"""``stop NAME``: suspend a RayJob (its Ray cluster goes, its checkpoints stay), or delete it
(``--delete``): ops/jobs/control.py."""

from __future__ import annotations

from typing import Any

from ops.context import Command, CommandSpec
from ops.errors import EXIT_OK
from ops.output import to_json
from ops.usage import CommandLine


def register(sub: Any, cli: CommandLine) -> None:
    p = cli.job_parser(
        sub,
        "stop",
        "stop a job; checkpoints stay",
        "Stop a RayJob: KubeRay deletes its Ray cluster (the GPUs are free at once) and keeps the\n"
        "job as Suspended (spec.suspend); `resume` starts it again. --delete deletes the RayJob\n"
        "object instead. Either way the checkpoints on FSx and in S3 stay.",
        target="required",
        examples=["stop NAME --env dev", "stop NAME --env dev --delete"],
    )
    p.add_argument("--delete", action="store_true", help="delete the RayJob instead of suspending it")


def run(command: Command) -> int:
    from ops.jobs import control

    args = command.args
    kube = command.kube()
    result = control.stop_job(kube, args.namespace, args.name, delete=args.delete, prog=command.prog, env=command.env)
    print(to_json(result) if args.json else result["message"], file=command.out)
    return EXIT_OK


COMMAND = CommandSpec("stop", register, run=run)
