"""Command line: ``hpray COMMAND --env NAME [--json]`` (installed by ``pip install .``, ``pipx install .``
or ``pip install -e .``), or ``python -m ops`` from the checkout."""

from __future__ import annotations

import argparse
import functools
import io
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from config import ConfigError
from config.environment import EnvironmentConfig
from config.loader import CONFIG_DIR
from manifests.check import load_checked
from ops.commands import BY_NAME, COMMANDS
from ops.context import Command, RenderFn
from ops.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_PIPE, EXIT_USAGE, OpsError, UsageError
from ops.output import to_json
from ops.usage import (
    CommandLine,
    Formatter,
    Parser,
    bundled_differs,
    config_dir_of,
    config_dir_option,
    split_command,
    unrecognized,
)

PROG = "python -m ops"

DESCRIPTION = """\
Operations for the HyperPod Ray platform, one environment at a time (config/<env>.yaml).

  preflight   before `cdk deploy`: quotas, AZ IDs, EKS version, CDK bootstrap, CIDR overlaps
  status      after deploy: HyperPod nodes and health, EKS, FSx, KubeRay, RayJobs/RayServices
  submit      render a workload's manifest (or your own job), apply it and follow it to the end
  jobs        list the RayJobs and their state
  describe    one job: its command, image, workers, state, pods and events
  pods        one job's pods: phase, readiness, restarts, node
  logs        print or follow a job's driver log, one pod's log (--pod), or save them all (--output-dir)
  stop        stop a job (its Ray cluster goes, its checkpoints stay); resume restarts it
  resume      restart a stopped job; it resumes from its checkpoints
  dashboard   port-forward to a Ray head and print the dashboard's local URL
  rollout     start or update a service (inference, llm) with a chosen model and follow it
  endpoint    reach a service's endpoint (inference, llm) on a local port (a port-forward)
  upgrade     plan a Kubernetes upgrade step by step (`upgrade plan`); --apply does the safe steps
  images      `images pin-base`: pin the workloads image's base by digest (Docker Hub, no AWS)
  env         show or set the default environment (`env use NAME`; $HPRAY_ENV; --env wins)
  completion  print the shell completion script (bash, zsh, fish)

Environments are the NAME.yaml files of --config-dir DIR (default: $HPRAY_CONFIG_DIR, else the
config/ folder of the checkout you are in, else the copy this command was installed with);
`%(prog)s --version` names the folder.
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
  %(prog)s submit job --env dev --working-dir . --runtime-env env.yaml --dry-run -- python train.py
  %(prog)s jobs --env dev
  %(prog)s describe NAME --env dev
  %(prog)s logs NAME --env dev --follow
  %(prog)s logs NAME --env dev --output-dir ./logs
  %(prog)s stop NAME --env dev
  %(prog)s upgrade plan --env dev --to 1.34

exit codes:
  0   all checks passed / healthy / job succeeded
  1   a check failed / something is unhealthy / the job failed
  2   bad command line or invalid environment config (found before anything is called)
  3   AWS credentials, permission, throttling or endpoint problem
  4   no such job (or pod of the job)
  5   no cluster access: the Kubernetes API is unreachable or refuses your identity
  6   quota exceeded: the namespace's ResourceQuota refused the job
  7   the job's pods cannot be scheduled (the pod and the scheduler's reason are shown)
  130 interrupted (Ctrl-C); a submitted job keeps running
  141 the output was closed early (`| head`); the rest was not printed"""


def build_parser(prog: str = PROG, config_dir: Path = CONFIG_DIR) -> argparse.ArgumentParser:
    """The whole command line: the top's options, then each command of ops/commands/ (COMMANDS) registers its own."""
    from ops.version import version

    parser = Parser(
        prog=prog,
        usage="%(prog)s COMMAND --env NAME [options]",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=Formatter,
    )
    parser.add_argument("--version", action="version", version=f"{prog} {version()} (environments: {config_dir})")
    config_dir_option(parser)
    # The commands are listed in DESCRIPTION (argparse mis-aligns its own list of subcommands).
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, help=argparse.SUPPRESS)
    cli = CommandLine(prog, config_dir)
    for spec in COMMANDS:
        spec.register(sub, cli)
    return parser


# ---------------------------------------------------------------------------------------------


def _default_aws(config: EnvironmentConfig, profile: str | None) -> Any:
    from ops.clients.aws import Aws

    return Aws(config.region, profile=profile)


def _default_kube(aws: Any, config: EnvironmentConfig, args: argparse.Namespace) -> Any:
    from ops.clients.kube import Kube

    return Kube.connect(aws, config.eks_cluster_name, kubeconfig=getattr(args, "kube_target", None))


def main(
    argv: Sequence[str] | None = None,
    *,
    aws_factory: Callable[[EnvironmentConfig, str | None], Any] = _default_aws,
    kube_factory: Callable[[Any, EnvironmentConfig, argparse.Namespace], Any] = _default_kube,
    render_fn: RenderFn | None = None,
    load_config: Callable[[str], EnvironmentConfig] = load_checked,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    out: TextIO | None = None,
    err: TextIO | None = None,
    prog: str = PROG,
    token_fn: Callable[[Any, str, dict[str, Any]], str | None] | None = None,
) -> int:
    """``token_fn(kube, namespace, head_pod)``: the Ray auth token for a head's Jobs API and
    dashboard (default: the namespace's token from Secrets Manager, a team's own in its namespace:
    ops/clients/ray_head.py platform_token_fn). Every check of the command line runs before ``aws_factory`` or
    ``kube_factory`` is called."""
    out, err = out or sys.stdout, err or sys.stderr
    args: argparse.Namespace | None = None
    as_yaml: TextIO | None = None  # -o yaml: the JSON output, converted when the command ends
    try:
        args, parser = _parse(list(sys.argv[1:] if argv is None else argv), prog)
        output = getattr(args, "output", None)
        if output in ("json", "yaml"):
            args.json = True
        if output == "yaml":
            as_yaml, out = out, io.StringIO()
        spec = BY_NAME[args.command]
        if spec.run_local is not None:  # no environment (completion; images: the Dockerfile and Docker Hub only)
            return spec.run_local(args, out, parser)
        if args.config_dir_used != CONFIG_DIR and load_config is load_checked:
            load_config = functools.partial(load_checked, config_dir=args.config_dir_used)
        warning = bundled_differs(args.config_dir_used, args.env)
        if warning:
            print(warning, file=err)
        config = load_config(args.env)
        _check_arguments(config, args, prog)
        if getattr(args, "dry_run", False) and spec.dry_run is not None:
            return spec.dry_run(config, args, out, render_fn)
        assert spec.run is not None, f"{spec.name}: a command runs locally or with its environment"
        aws = aws_factory(config, args.profile)
        if token_fn is None:
            from ops.clients.ray_head import platform_token_fn

            token_fn = platform_token_fn(config, aws)
        command = Command(
            config,
            args,
            out,
            aws,
            kube_factory,
            prog=prog,
            sleep=sleep,
            clock=clock,
            token_fn=token_fn,
            render_fn=render_fn,
        )
        return spec.run(command)
    except BrokenPipeError:
        return _closed_pipe(out)
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
    finally:
        if as_yaml is not None and isinstance(out, io.StringIO):
            as_yaml.write(_yaml_of(out.getvalue()))


def _yaml_of(text: str) -> str:
    """``-o yaml``: the command's JSON (one document, or JSON Lines: one YAML document each) as YAML."""
    import json

    import yaml

    if not text.strip():
        return text
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError:
        try:
            docs = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError:
            return text  # not JSON (a command without a machine-readable form): as printed
    return "---\n".join(yaml.safe_dump(d, sort_keys=False, default_flow_style=False) for d in docs)


def _parse(argv: list[str], prog: str) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    """The command line and its parser, or a UsageError: an option the chosen command does not
    take, a command after -- for anything but ``submit job``."""
    argv, job_command = split_command(argv)
    if argv[:1] == ["submit"] and (len(argv) < 2 or argv[1].startswith("-")) and not {"-h", "--help"} & set(argv):
        raise UsageError(
            "submit needs the WORKLOAD first: training, inference or job", f"e.g. {prog} submit training --env dev"
        )
    config_dir = config_dir_of(argv)
    parser = build_parser(prog, config_dir)
    try:
        args, extras = parser.parse_known_args(argv)
    except UsageError as e:
        if not re.search(r"the following arguments are required: .*--env\b", e.message):
            raise
        # No --env: the default environment ($HPRAY_ENV, else `hpray env use NAME`'s), as kubectl's current context.
        from config import known_environments
        from ops.current_env import check_known, default_env

        default = default_env()
        if default is None:
            raise UsageError(
                e.message, f"pass --env NAME, set HPRAY_ENV=NAME, or make one the default: {prog} env use NAME"
            ) from None
        check_known(default.name, known_environments(config_dir), default.source)
        args, extras = parser.parse_known_args([*argv, "--env", default.name])
    if extras:
        raise unrecognized(parser, args, extras)
    args.job_command, args.config_dir_used = job_command, config_dir
    if job_command and not (args.command == "submit" and args.workload == "job"):
        where = f"{prog} {args.command}" + (f" {args.workload}" if args.command == "submit" else "")
        raise UsageError(f"{where} takes no command after --; only `submit job` runs one", f"see {where} --help")
    return args, parser


def _check_arguments(config: EnvironmentConfig, args: argparse.Namespace, prog: str) -> None:
    """What the parser cannot check alone, before any client is made: the kubeconfig, then the
    command's own checks (a job's directory, command, placement and runtime env: ``submit job`` is
    packaged and rendered here)."""
    args.kube_target = None
    if getattr(args, "kubeconfig", None) or getattr(args, "context", None):
        from ops.clients.kubeconfig import check

        args.kube_target = check(args.kubeconfig, args.context, cluster=config.eks_cluster_name, region=config.region)
    spec = BY_NAME[args.command]
    if spec.check is not None:
        spec.check(config, args, prog)


def _closed_pipe(out: TextIO) -> int:
    """The reader of our stdout went away (``| head``): stop quietly. Python would print a
    BrokenPipeError when it flushes stdout at exit, so stdout becomes /dev/null first."""
    if out is sys.stdout:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
    return EXIT_PIPE


def entry_point() -> None:
    """The installed ``hpray`` command (pyproject.toml [project.scripts])."""
    sys.exit(main(prog="hpray"))
