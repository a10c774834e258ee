"""``jobs``: list the RayJobs (newest first) and their state (ops/jobs/control.py)."""

from __future__ import annotations

from typing import Any

from ops.context import Command, CommandSpec
from ops.errors import EXIT_OK
from ops.output import to_json
from ops.usage import CommandLine


def register(sub: Any, cli: CommandLine) -> None:
    p = cli.job_parser(
        sub,
        "jobs",
        "list RayJobs",
        "List the RayJobs (newest first) with their KubeRay state, the Ray job's state, failed\n"
        "attempts and start/end times. A namespaced list: a team's Role is enough for -n TEAM.",
        target=None,
        examples=["jobs --env dev", "jobs --env dev -n team-vision --json"],
    )
    p.add_argument("--all-namespaces", "-A", action="store_true", help="every namespace (needs cluster-wide list)")


def run(command: Command) -> int:
    from ops.jobs import control

    args = command.args
    rows = control.list_jobs(command.kube(), None if args.all_namespaces else args.namespace)
    print(
        to_json({"environment": command.env, "jobs": rows})
        if args.json
        else control.render_jobs(rows, wide=getattr(args, "output", None) == "wide"),
        file=command.out,
    )
    return EXIT_OK


COMMAND = CommandSpec("jobs", register, run=run)
