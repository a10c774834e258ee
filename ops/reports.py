"""The runs of the two report commands: ``preflight`` (before ``cdk deploy``) and ``status``
(after it): gather, then print a table or JSON and turn the result into the exit code."""

from __future__ import annotations

from config import ConfigError
from config.environment import EnvironmentConfig
from ops.context import Command
from ops.errors import EXIT_FAILED, EXIT_OK
from ops.output import table, to_json


def run_preflight_command(command: Command) -> int:
    from ops.checks import FAIL, WARN
    from ops.preflight import exit_status, run_preflight

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


def run_status_command(command: Command) -> int:
    from ops import status

    report = status.gather(command.config, command.aws, command.kube)
    print(to_json(report) if command.args.json else status.render(report), file=command.out)
    return EXIT_FAILED if report["problems"] else EXIT_OK
