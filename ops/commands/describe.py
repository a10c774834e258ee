"""``describe NAME``: one job's spec, state, pods and events (ops/jobs/inspection.py)."""

from __future__ import annotations

from typing import Any

from ops.context import Command, CommandSpec
from ops.errors import EXIT_OK
from ops.output import to_json
from ops.usage import CommandLine


def register(sub: Any, cli: CommandLine) -> None:
    cli.job_parser(
        sub,
        "describe",
        "show one job or service: spec, state, pods, events",
        "Show one RayJob as `kubectl describe` and `ray job status` would together: its command,\n"
        "image, runtime env and workers; KubeRay's state, the Ray job's state, attempts and the last\n"
        "message; its pods; and the newest events of the job and its pods. A RayService of that name:\n"
        "its state, Serve applications, endpoints, image, workers, pods and events.",
        target="required",
        examples=["describe NAME --env dev", "describe NAME --env dev --json | jq .pods"],
    )


def run(command: Command) -> int:
    from ops.jobs import inspection

    args = command.args
    kube = command.kube()
    report = inspection.describe(kube, args.namespace, args.name, prog=command.prog, env=command.env)
    print(to_json(report) if args.json else inspection.render_describe(report), file=command.out)
    return EXIT_OK


COMMAND = CommandSpec("describe", register, run=run)
