"""``status``: the deployed environment's health (gathered and rendered by ops/reports/status.py);
exit 1 if anything is unhealthy."""

from __future__ import annotations

from typing import Any

from ops.context import Command, CommandSpec
from ops.errors import EXIT_FAILED, EXIT_OK
from ops.output import to_json
from ops.usage import CommandLine


def register(sub: Any, cli: CommandLine) -> None:
    p = sub.add_parser(
        "status",
        prog=f"{cli.prog} status",
        help="show the deployed environment's health",
        description=(
            "Show the deployed environment: HyperPod cluster status and every node with its instance\n"
            "group, status and health label; EKS cluster status; FSx for Lustre lifecycle; KubeRay\n"
            "operator readiness; RayJobs and RayServices with their states; the day-one check of\n"
            "security groups for pods (system nodes have branch interfaces, HyperPod nodes do not, every\n"
            "running Ray head has its own; a WARN, which does not count as unhealthy).\n"
            "Exits 1 if anything is unhealthy (a failed RayJob is shown but does not count)."
        ),
        formatter_class=cli.formatter,
    )
    cli.common(p, kube=True)


def run(command: Command) -> int:
    from ops.reports import status

    report = status.gather(command.config, command.aws, command.kube)
    print(to_json(report) if command.args.json else status.render(report), file=command.out)
    return EXIT_FAILED if report["problems"] else EXIT_OK


COMMAND = CommandSpec("status", register, run=run)
