"""``teardown``: before ``cdk destroy``, delete the Ray workloads and wait until their branch
network interfaces are gone (ops/teardown.py). Lists only, unless ``--yes``."""

from __future__ import annotations

from typing import Any

from ops.context import Command, CommandSpec
from ops.errors import EXIT_OK
from ops.output import to_json
from ops.usage import CommandLine, positive_float, positive_int


def register(sub: Any, cli: CommandLine) -> None:
    p = sub.add_parser(
        "teardown",
        prog=f"{cli.prog} teardown",
        help="before `cdk destroy`: remove the Ray workloads, wait for their interfaces",
        description=(
            "Before `cdk destroy`: delete every RayJob, RayService and RayCluster of its own in the\n"
            "workloads' and the teams' namespaces, then wait until no branch network interface of the\n"
            "Ray heads' security group is left (the VPC resource controller deletes them as the head\n"
            "pods go, but not with the cluster; one left behind stops the deletion of the group, the\n"
            "subnets and the VPC). Without --yes it only lists what it would delete and the interfaces."
        ),
        formatter_class=cli.formatter,
    )
    cli.common(p, kube=True)
    p.add_argument("--yes", action="store_true", help="delete the workloads and wait (default: list only)")
    p.add_argument(
        "--timeout-minutes",
        type=positive_int,
        default=20,
        metavar="N",
        help="give up waiting after N minutes (default: %(default)s)",
    )
    p.add_argument(
        "--poll-seconds",
        type=positive_float,
        default=15.0,
        metavar="S",
        help="seconds between checks while waiting (default: %(default)s)",
    )


def run(command: Command) -> int:
    from ops.teardown import teardown

    args, out = command.args, command.out

    def emit(text: str) -> None:
        if not args.json:
            print(text, file=out)

    result = teardown(
        command.config,
        command.aws,
        command.kube(),
        act=args.yes,
        timeout_s=args.timeout_minutes * 60,
        poll_s=args.poll_seconds,
        emit=emit,
        sleep=command.sleep,
        clock=command.clock,
        prog=command.prog,
    )
    if args.json:
        print(to_json(result), file=out)
    return EXIT_OK


COMMAND = CommandSpec("teardown", register, run=run)
