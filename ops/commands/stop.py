"""``stop NAME``: suspend a RayJob (its Ray cluster goes, its checkpoints stay), delete it
(``--delete``), or stop only its Ray job as ``ray job stop`` does (``--job``): ops/jobs/control.py."""

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
        "Stop a RayJob at the cluster level: KubeRay deletes its Ray cluster (the GPUs are free at\n"
        "once) and keeps the job as Suspended (spec.suspend); `resume` starts it again. --delete\n"
        "deletes the RayJob object instead. --job stops only the Ray job, as `ray job stop` does\n"
        "(the dashboard's POST /api/jobs/ID/stop): the driver ends, the job is STOPPED and KubeRay\n"
        "ends the RayJob; submit it again to rerun. Either way the checkpoints on FSx and in S3 stay.",
        target="required",
        examples=["stop NAME --env dev", "stop NAME --env dev --delete", "stop NAME --env dev --job"],
    )
    how = p.add_mutually_exclusive_group()
    how.add_argument("--delete", action="store_true", help="delete the RayJob instead of suspending it")
    how.add_argument("--job", action="store_true", help="stop the Ray job only, as `ray job stop` (not resumable)")


def run(command: Command) -> int:
    from ops.jobs import control

    args = command.args
    kube = command.kube()
    if args.job:
        result = control.stop_ray_job(
            kube, args.namespace, args.name, token_fn=command.token_fn, prog=command.prog, env=command.env
        )
    else:
        result = control.stop_job(
            kube, args.namespace, args.name, delete=args.delete, prog=command.prog, env=command.env
        )
    print(to_json(result) if args.json else result["message"], file=command.out)
    return EXIT_OK


COMMAND = CommandSpec("stop", register, run=run)
