"""``dashboard [NAME]``: port-forward a local port to a Ray head's dashboard and print the URL
(ops/clients/portforward.py)."""

from __future__ import annotations

import argparse
from typing import Any

from config.environment import EnvironmentConfig
from ops.context import Command, CommandSpec
from ops.errors import UsageError
from ops.usage import CommandLine


def register(sub: Any, cli: CommandLine) -> None:
    p = cli.job_parser(
        sub,
        "dashboard",
        "port-forward to a Ray head's dashboard",
        "Port-forward a local port to the Ray dashboard of a job's (or service's) head pod\n"
        "through the Kubernetes API and print the local URL (with the token where Ray's token\n"
        "authentication is on). Without NAME: the only running Ray cluster of the namespace.\n"
        "Ctrl-C ends it.",
        target="optional",
        examples=["dashboard --env dev", "dashboard NAME --env dev --port 0"],
    )
    p.add_argument(
        "--port", type=int, default=8265, metavar="PORT", help="local port (default: %(default)s; 0 picks a free one)"
    )


def check(config: EnvironmentConfig, args: argparse.Namespace, prog: str) -> None:
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port", "use 1-65535, or 0 for any free port")


def run(command: Command) -> int:
    from ops.clients.portforward import serve_dashboard

    args = command.args
    return serve_dashboard(
        command.kube(),
        args.namespace,
        args.name,
        local_port=args.port,
        out=command.out,
        json_mode=args.json,
        prog=command.prog,
        env=command.env,
        token_fn=command.token_fn,
    )


COMMAND = CommandSpec("dashboard", register, run=run, check=check)
