"""Command line: ``hpray COMMAND --env NAME [--json]`` (installed by ``pip install .``, ``pipx install .``
or ``pip install -e .``), or ``python -m ops`` from the checkout."""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from config import ConfigError, known_environments, load_environment
from config.environment import EnvironmentConfig
from config.loader import CONFIG_DIR
from ops.config_dir import config_dir_of, config_dir_option
from ops.context import Command
from ops.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, OpsError
from ops.output import table, to_json

PROG = "python -m ops"

DESCRIPTION = """\
Operations for the HyperPod Ray platform, one environment at a time (config/<env>.yaml).

  preflight   before `cdk deploy`: quotas, AZ IDs, EKS version, CDK bootstrap, CIDR overlaps
  status      after deploy: HyperPod nodes and health, EKS, FSx, KubeRay, RayJobs/RayServices
  submit      render a workload's manifest (or your own job), apply it and follow it to the end
  jobs        list the RayJobs and their state
  logs        print or follow a job's driver log
  stop        stop a job (its Ray cluster goes, its checkpoints stay); resume restarts it
  resume      restart a stopped job; it resumes from its checkpoints
  dashboard   port-forward to a Ray head and print the dashboard's local URL
  upgrade     plan a Kubernetes upgrade step by step (`upgrade plan`); --apply does the safe steps
  images      `images pin-base`: pin the workloads image's base by digest (Docker Hub, no AWS)
  completion  print the shell completion script (bash; zsh with bashcompinit)

Environments are the NAME.yaml files of --config-dir DIR (default: $HPRAY_CONFIG_DIR, else the
config/ folder this command was installed or run from).
Uses your AWS credentials (--profile or the usual AWS_* variables / SSO). Read-only except
`submit` (creates or updates one RayJob or RayService; `submit job` also uploads your working
directory), `stop`/`resume` (suspend or resume one RayJob), `dashboard` (a local port-forward)
and `images pin-base` (writes workloads/Dockerfile).
`%(prog)s COMMAND --help` shows a command's options."""

EPILOG = """\
examples:
  %(prog)s preflight --env dev
  %(prog)s status --env prod --json | jq .problems
  %(prog)s submit training --env dev
  %(prog)s submit training --env dev --attach     # follow a running job again
  %(prog)s submit job --env dev --working-dir . --gpus 4 -- python train.py --lr 3e-4
  %(prog)s jobs --env dev
  %(prog)s logs NAME --env dev --follow
  %(prog)s stop NAME --env dev
  %(prog)s upgrade plan --env dev --to 1.34

exit codes:
  0   all checks passed / healthy / job succeeded
  1   a check failed / something is unhealthy / the job failed
  2   bad command line or invalid environment config
  3   AWS credentials, permission, throttling or endpoint problem
  4   no such job
  5   no cluster access: the Kubernetes API is unreachable or refuses your identity
  6   quota exceeded: the namespace's ResourceQuota refused the job
  7   the job's pods cannot be scheduled (the pod and the scheduler's reason are shown)
  130 interrupted (Ctrl-C); a submitted job keeps running"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=100)


def _common(parser: argparse.ArgumentParser, *, kube: bool, config_dir: Path = CONFIG_DIR) -> None:
    envs = known_environments(config_dir)
    parser.add_argument(
        "--env",
        required=True,
        metavar="NAME",
        choices=envs,
        help=f"environment to act on: NAME.yaml in {config_dir} ({', '.join(envs)})",
    )
    config_dir_option(parser)
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of tables")
    parser.add_argument(
        "--profile", metavar="PROFILE", help="AWS profile from ~/.aws/config (default: AWS_PROFILE / default chain)"
    )
    if kube:
        parser.add_argument(
            "--kubeconfig",
            metavar="PATH",
            help="use this kubeconfig instead of connecting to the environment's EKS cluster with your AWS identity",
        )
        parser.add_argument(
            "--context", metavar="NAME", help="kubeconfig context to use (with --kubeconfig or ~/.kube/config)"
        )


def build_parser(prog: str = PROG, config_dir: Path = CONFIG_DIR) -> argparse.ArgumentParser:
    from ops.version import version

    parser = argparse.ArgumentParser(
        prog=prog,
        usage="%(prog)s COMMAND --env NAME [options]",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"{prog} {version()} (environments: {config_dir})")
    config_dir_option(parser)
    common = functools.partial(_common, config_dir=config_dir)
    # The commands are listed in DESCRIPTION (argparse mis-aligns its own list of subcommands).
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, help=argparse.SUPPRESS)

    p = sub.add_parser(
        "preflight",
        prog=f"{prog} preflight",
        help="check the account and region before `cdk deploy`",
        description=(
            "Check the account and region before `cdk deploy` and print a PASS/WARN/FAIL table with a fix\n"
            "for each failure:\n"
            "  - the credentials are for the environment's account\n"
            '  - the SageMaker quota "<instance type> for cluster usage" covers the configured instance counts\n'
            "  - every configured AZ ID exists in the region (and has the configured name in this account)\n"
            "  - EKS offers the configured Kubernetes version in the region\n"
            "  - the CDK bootstrap stack exists and is recent enough\n"
            "  - no other VPC overlaps the configured CIDRs (warning only)\n"
            "  - the workloads image's base is pinned by digest (fix: hpray images pin-base)\n"
            "Exits 1 if any check FAILs."
        ),
        formatter_class=_Formatter,
    )
    common(p, kube=False)
    p.add_argument(
        "--toolkit-stack-name",
        metavar="NAME",
        default="CDKToolkit",
        help="CDK bootstrap stack name (default: %(default)s)",
    )

    p = sub.add_parser(
        "status",
        prog=f"{prog} status",
        help="show the deployed environment's health",
        description=(
            "Show the deployed environment: HyperPod cluster status and every node with its instance\n"
            "group, status and health label; EKS cluster status; FSx for Lustre lifecycle; KubeRay\n"
            "operator readiness; RayJobs and RayServices with their states.\n"
            "Exits 1 if anything is unhealthy (a failed RayJob is shown but does not count)."
        ),
        formatter_class=_Formatter,
    )
    common(p, kube=True)

    p = sub.add_parser(
        "submit",
        prog=f"{prog} submit",
        help="submit a workload and follow it",
        description=(
            "Render the workload's manifest from the environment config (the same renderer as\n"
            "`python -m workloads render`), apply it, and follow it: state changes, training steps\n"
            "from the job's own log lines, resumes after failures. Ctrl-C stops following; the job\n"
            "keeps running and the message says how to reattach.\n"
            "  training    a RayJob; an identical job still running is followed, not resubmitted\n"
            "  inference   a RayService; an existing one is updated in place"
        ),
        formatter_class=_Formatter,
    )
    p.add_argument(
        "workload",
        choices=["training", "inference", "job"],
        help="training (RayJob), inference (RayService) or job (your own command)",
    )
    common(p, kube=True)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--attach", action="store_true", help="do not apply anything; follow the workload already submitted"
    )
    mode.add_argument("--no-follow", action="store_true", help="apply and return at once")
    p.add_argument(
        "--poll-seconds", type=_positive, default=5.0, metavar="S", help="seconds between polls (default: %(default)s)"
    )
    p.add_argument(
        "--timeout-minutes",
        type=_positive,
        default=None,
        metavar="M",
        help="stop following after M minutes (the job keeps running)",
    )
    from ops.job_cli import add_job_commands, add_submit_job_options

    add_submit_job_options(p)
    add_job_commands(sub, prog, common, _Formatter)
    from ops.upgrade import add_upgrade_command

    add_upgrade_command(sub, prog, common, _Formatter)
    from ops.base_image import add_images_command

    add_images_command(sub, prog, _Formatter)
    return parser


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


# ---------------------------------------------------------------------------------------------


def _default_aws(config: EnvironmentConfig, profile: str | None) -> Any:
    from ops.aws import Aws

    return Aws(config.region, profile=profile)


def _default_kube(aws: Any, config: EnvironmentConfig, args: argparse.Namespace) -> Any:
    from ops.kube import Kube

    return Kube.connect(aws, config.eks_cluster_name, kubeconfig=args.kubeconfig, context=args.context)


def main(
    argv: Sequence[str] | None = None,
    *,
    aws_factory: Callable[[EnvironmentConfig, str | None], Any] = _default_aws,
    kube_factory: Callable[[Any, EnvironmentConfig, argparse.Namespace], Any] = _default_kube,
    render_fn: Callable[[str, EnvironmentConfig], dict[str, Any]] | None = None,
    load_config: Callable[[str], EnvironmentConfig] = load_environment,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    out: TextIO | None = None,
    err: TextIO | None = None,
    prog: str = PROG,
    token_fn: Callable[[Any, str, dict[str, Any]], str | None] | None = None,
) -> int:
    """``token_fn(kube, namespace, head_pod)``: the Ray auth token for a head's Jobs API and
    dashboard (default: the namespace's token from Secrets Manager, a team's own in its namespace:
    ops/jobs.platform_token_fn)."""
    out, err = out or sys.stdout, err or sys.stderr
    from ops.job_cli import JOB_COMMANDS, run_job_command, split_command

    argv, job_command = split_command(list(sys.argv[1:] if argv is None else argv))
    config_dir = config_dir_of(argv)
    if config_dir != CONFIG_DIR and load_config is load_environment:
        load_config = functools.partial(load_environment, config_dir=config_dir)
    args = build_parser(prog, config_dir).parse_args(argv)
    args.job_command = job_command
    if args.command == "completion":
        from ops.completion import bash_script

        print(bash_script(build_parser(prog, config_dir), prog), file=out)
        return EXIT_OK
    try:
        if args.command == "images":  # no environment: the Dockerfile and Docker Hub only
            from ops.base_image import run_images

            return run_images(args, out)
        if job_command and not (args.command == "submit" and args.workload == "job"):
            raise OpsError("a command after -- is only for `submit job`", f"see {prog} submit --help")
        config = load_config(args.env)
        aws = aws_factory(config, args.profile)
        if token_fn is None:
            from ops.ray_head import platform_token_fn

            token_fn = platform_token_fn(config, aws)
        command = Command(config, args, out, aws, kube_factory, prog=prog, sleep=sleep, clock=clock, token_fn=token_fn)
        if args.command in JOB_COMMANDS or (args.command == "submit" and args.workload == "job"):
            return run_job_command(command)
        if args.command == "upgrade":
            from ops.upgrade import run_upgrade

            return run_upgrade(command)
        if args.command == "preflight":
            return _preflight(command)
        if args.command == "status":
            return _status(command)
        return _submit(command, render_fn)
    except ConfigError as e:
        print(e.render(), file=err)
        return EXIT_USAGE
    except OpsError as e:
        print(e.render(), file=err)
        if getattr(args, "json", False):
            print(to_json({"error": e.message, "fix": e.fix, "kind": type(e).__name__}), file=out)
        return e.exit_code
    except KeyboardInterrupt:
        print("\ninterrupted", file=err)
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug: say so plainly; the traceback only on request
        if os.environ.get("OPS_DEBUG"):
            traceback.print_exc(file=err)
        print(f"internal error: {type(e).__name__}: {e} (rerun with OPS_DEBUG=1 for the traceback)", file=err)
        return EXIT_FAILED


def _preflight(command: Command) -> int:
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
    from config.pipeline import load_pipeline

    try:
        pipeline, environments = load_pipeline()
    except ConfigError:
        return None
    return pipeline.account if any(e.name == config.name for e in environments) else None


def _status(command: Command) -> int:
    from ops import status

    report = status.gather(command.config, command.aws, command.kube)
    print(to_json(report) if command.args.json else status.render(report), file=command.out)
    return EXIT_FAILED if report["problems"] else EXIT_OK


def _submit(command: Command, render_fn: Any) -> int:
    from ops import render as renderer
    from ops.submit import Follower, Target, apply

    config, args = command.config, command.args

    manifest = (render_fn or renderer.render)(args.workload, config)
    kind = manifest["kind"]
    namespace = manifest["metadata"].get("namespace", "default")
    name = manifest["metadata"]["name"]
    kube = command.kube()
    # The run's step budget (training.steps) makes the display a fraction with an ETA.
    total_steps = getattr(config.training, "steps", None) if args.workload == "training" else None
    follower = Follower(
        kube,
        Target(workload=args.workload, env=config.name, kind=kind, namespace=namespace, name=name),
        command.follow_options(total_steps=total_steps if isinstance(total_steps, int) else None),
    )
    if not args.attach:
        try:
            apply(kube, manifest, follower.emit)
        except KeyboardInterrupt:
            from ops.submit import reattach_command

            msg = (
                f"interrupted while applying {kind} {namespace}/{name}; it may or may not exist now.\n"
                f"  check:     kubectl -n {namespace} get {kind.lower()} {name}\n"
                f"  reattach:  {reattach_command(args.workload, config.name)}"
            )
            follower.emit(msg if follower.json_mode else "\n" + msg, event="interrupted")
            return EXIT_INTERRUPTED
    if args.no_follow:
        follower.emit(f"not following; watch it with: {PROG} submit {args.workload} --env {config.name} --attach")
        return EXIT_OK
    return follower.run()


def entry_point() -> None:
    """The installed ``hpray`` command (pyproject.toml [project.scripts])."""
    sys.exit(main(prog="hpray"))
