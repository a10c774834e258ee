"""``upgrade plan --env NAME [--to VERSION] [--apply]``: print the ordered steps of a one-minor
Kubernetes upgrade (ops/upgrade/plan.py); ``--apply`` does the safe ones."""

from __future__ import annotations

import argparse
import re
from typing import Any

from config.environment import EnvironmentConfig
from ops.context import Command, CommandSpec
from ops.output import to_json
from ops.usage import CommandLine


def register(sub: Any, cli: CommandLine) -> None:
    prog = cli.prog
    p = sub.add_parser(
        "upgrade",
        prog=f"{prog} upgrade",
        help="plan a Kubernetes upgrade",
        formatter_class=cli.formatter,
        description="Print the ordered steps of a one-minor Kubernetes upgrade of the environment (control plane,\n"
        "add-ons, system nodes, HyperPod software, KubeRay CRDs, jobs paused and resumed from their\n"
        "checkpoints), each with its commands or config edit and what it disrupts.\n"
        "--apply does the safe steps: the read-only checks, and the KubeRay CRDs applied\n"
        "server-side (a server dry run of every CRD first).",
    )
    p.add_argument("action", metavar="ACTION", choices=["plan"], help="plan: print the steps")
    cli.common(p, kube=True)
    p.add_argument(
        "--to",
        metavar="VERSION",
        type=kubernetes_minor,
        help="target Kubernetes minor, e.g. 1.35 (default: the next one)",
    )
    p.add_argument(
        "--apply", action="store_true", help="also do the safe steps (read-only checks, CRD apply with a dry run first)"
    )


def kubernetes_minor(text: str) -> str:
    """``--to``: a Kubernetes minor version, MAJOR.MINOR."""
    if not re.fullmatch(r"\d+\.\d+", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Kubernetes minor version such as 1.35")
    return text


def check(config: EnvironmentConfig, args: argparse.Namespace, prog: str) -> None:
    """A ``--to`` the environment cannot go to (more than one minor, or backwards) is a usage error."""
    if args.to:
        from ops.upgrade.plan import target_version

        target_version(config, args.to)


def run(command: Command) -> int:
    from ops.upgrade.plan import apply_safe_steps, as_dict, plan, render, target_version

    config, args, out = command.config, command.args, command.out

    # The add-on builds EKS offers for the target name the builds to move to where a pin is not
    # offered; without AWS access the plan prints the pins alone and says why.
    from ops.errors import OpsError
    from ops.reports.addons import offered_builds

    target = target_version(config, args.to)
    try:
        offered = offered_builds(command.aws, target)
        asked = f"add-on builds checked against the builds EKS offers for Kubernetes {target} in {config.region}"
    except OpsError as err:
        offered = None
        asked = f"add-on builds not checked against EKS ({err.message}); --apply checks them"
    header, steps = plan(config, args.to, offered=offered)
    header = f"{header}\n{asked}"
    if not args.apply:
        print(to_json(as_dict(header, steps)) if args.json else render(header, steps), file=out)
        return 0
    messages: list[str] = []

    def emit(text: str) -> None:
        messages.append(text)
        if not args.json:
            print(text, file=out)

    if not args.json:
        print(render(header, steps) + "\n\n--apply: the safe steps", file=out)
    result = apply_safe_steps(config, command.aws, command.kube(), target, emit=emit)
    if args.json:
        print(to_json({**as_dict(header, steps), "applied": result, "messages": messages}), file=out)
    return 0


COMMAND = CommandSpec("upgrade", register, run=run, check=check)
