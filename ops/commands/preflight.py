"""``preflight``: is the account and region ready for ``cdk deploy`` (the checks:
ops/reports/preflight.py)? A PASS/WARN/FAIL table or JSON; exit 1 if any check fails."""

from __future__ import annotations

from typing import Any

from config import ConfigError
from config.environment import EnvironmentConfig
from ops.context import Command, CommandSpec
from ops.output import table, to_json
from ops.usage import CommandLine


def register(sub: Any, cli: CommandLine) -> None:
    p = sub.add_parser(
        "preflight",
        prog=f"{cli.prog} preflight",
        help="check the account and region before `cdk deploy`",
        description=(
            "Check the account and region before `cdk deploy` and print a PASS/WARN/FAIL table with a fix\n"
            "for each failure:\n"
            "  - the credentials are for the environment's account\n"
            '  - the SageMaker quota "<instance type> for cluster usage" covers the configured instance counts\n'
            "  - every configured AZ ID exists in the region (and has the configured name in this account)\n"
            "  - EKS offers the configured Kubernetes version in the region\n"
            "  - EKS offers each pinned add-on build (config/versions.py) for that version\n"
            "  - the CDK bootstrap stack exists and is recent enough\n"
            "  - no other VPC overlaps the configured CIDRs (warning only)\n"
            "  - the workloads image's base is pinned by digest (fix: hpray images pin-base)\n"
            "Exits 1 if any check FAILs."
        ),
        formatter_class=cli.formatter,
    )
    cli.common(p, kube=False)
    p.add_argument(
        "--toolkit-stack-name",
        metavar="NAME",
        default="CDKToolkit",
        help="CDK bootstrap stack name (default: %(default)s)",
    )


def run(command: Command) -> int:
    from ops.reports.checks import FAIL, WARN
    from ops.reports.preflight import exit_status, run_preflight

    config, aws, args, out = command.config, command.aws, command.args, command.out

    checks = run_preflight(
        config, aws, toolkit_stack=args.toolkit_stack_name, pipeline_account=_pipeline_account(config)
    )
    code = exit_status(checks)
    if args.json:
        print(
            to_json(
                {
                    "environment": config.name,
                    "region": config.region,
                    "passed": code == 0,
                    "checks": [c.as_dict() for c in checks],
                }
            ),
            file=out,
        )
        return code
    print(f"Preflight for environment {config.name} (account {config.account}, {config.region})\n", file=out)
    rows = []
    for c in checks:
        detail = c.detail + (f"\nfix: {c.fix}" if c.fix and c.status in (FAIL, WARN) else "")
        rows.append([c.status, c.check, detail])
    print(table(["RESULT", "CHECK", "DETAIL"], rows), file=out)
    failed = sum(c.status == FAIL for c in checks)
    warned = sum(c.status == WARN for c in checks)
    verdict = "ready to deploy" if not failed else "NOT ready to deploy"
    print(f"\n{len(checks)} checks: {failed} failed, {warned} warning(s): {verdict}", file=out)
    return code


def _pipeline_account(config: EnvironmentConfig) -> str | None:
    """The delivery pipeline's account when config/pipeline.yaml deploys this environment."""
    from stacks.pipeline_config import load_pipeline

    try:
        pipeline, environments = load_pipeline()
    except ConfigError:
        return None
    return pipeline.account if any(e.name == config.name for e in environments) else None


COMMAND = CommandSpec("preflight", register, run=run)
