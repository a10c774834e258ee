"""``submit training|inference|job``: the command line (each workload its own options, so an
option of another is refused) and the runs of ``training`` and ``inference``; ``job`` runs in
ops/job_cli.py."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from config.environment import EnvironmentConfig
from ops.context import Command
from ops.errors import EXIT_INTERRUPTED, EXIT_OK
from ops.output import to_json
from ops.usage import positive_float

JOB_HELP = "your own command (after --) on the environment's Ray cluster, your directory uploaded"


def workload_help() -> dict[str, str]:
    """``submit``'s workloads and their help: each registered workload that ``hpray submit``
    offers (manifests/registry.py ``Workload.submit``), then ``job``."""
    from manifests import registry

    return {**{w.key: w.submit for w in registry.workloads() if w.submit}, "job": JOB_HELP}


def add_submit_command(sub: Any, prog: str, common: Any, formatter: Any) -> None:
    from ops.job_cli import add_submit_job_options

    p = sub.add_parser(
        "submit",
        prog=f"{prog} submit",
        usage="%(prog)s WORKLOAD --env NAME [options]",
        help="submit a workload and follow it",
        description=(
            "Render the workload's manifest from the environment config (the same renderer as\n"
            "`python -m manifests render`), apply it, and follow it: state changes, training steps\n"
            "from the job's own log lines, resumes after failures. Ctrl-C stops following; the job\n"
            "keeps running and the message says how to reattach. --dry-run prints the manifest and\n"
            "calls nothing.\n"
            + "".join(f"  {name:<10}  {text}\n" for name, text in workload_help().items())
            + f"`{prog} submit WORKLOAD --help` shows a workload's options."
        ),
        formatter_class=formatter,
    )
    workloads = p.add_subparsers(dest="workload", metavar="WORKLOAD", required=True, help=argparse.SUPPRESS)
    for name, text in workload_help().items():
        w = workloads.add_parser(
            name,
            prog=f"{prog} submit {name}",
            help=text,
            usage="%(prog)s --env NAME --working-dir DIR [options] -- COMMAND [ARG ...]" if name == "job" else None,
            description=_description(name, prog),
            formatter_class=formatter,
        )
        common(w, kube=True)
        mode = w.add_mutually_exclusive_group()
        mode.add_argument(
            "--attach", action="store_true", help="do not apply anything; follow the workload already submitted"
        )
        mode.add_argument("--no-follow", action="store_true", help="apply and return at once")
        mode.add_argument(
            "--dry-run",
            action="store_true",
            help="print the manifest (YAML; JSON with --json) and exit; nothing is uploaded or applied",
        )
        w.add_argument(
            "--poll-seconds",
            type=positive_float,
            default=5.0,
            metavar="S",
            help="seconds between polls (default: %(default)s)",
        )
        w.add_argument(
            "--timeout-minutes",
            type=positive_float,
            default=None,
            metavar="M",
            help="stop following after M minutes (the job keeps running)",
        )
        if name == "job":
            add_submit_job_options(w)


def _description(workload: str, prog: str) -> str:
    help_text = workload_help()[workload]
    text = help_text[0].upper() + help_text[1:] + "."
    if workload != "job":
        return (
            f"{text}\n\nexamples:\n  {prog} submit {workload} --env dev\n  {prog} submit {workload} --env dev --dry-run"
        )
    return (
        f"{text}\n\nexamples:\n"
        f"  {prog} submit job --env dev --working-dir . --gpus 8 -- python train.py --lr 3e-4\n"
        f"  {prog} submit job --env dev --working-dir . --runtime-env env.yaml -- python train.py\n"
        f"  {prog} submit job --env dev --working-dir . --dry-run -- python train.py   # print the RayJob\n"
        f"  {prog} submit job --env dev --attach --name NAME                          # follow it again"
    )


def print_manifest(manifest: dict[str, Any], out: TextIO, *, json_mode: bool, comments: list[str]) -> int:
    """The manifest a dry run would apply: YAML for ``kubectl apply -f -`` (what it would do
    otherwise as ``#`` comments above it), or JSON."""
    import yaml

    if json_mode:
        print(to_json(manifest), file=out)
        return EXIT_OK
    for line in comments:
        print(f"# {line}", file=out)
    print(yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False).rstrip(), file=out)
    return EXIT_OK


def dry_run(config: EnvironmentConfig, args: argparse.Namespace, render_fn: Any, out: TextIO) -> int:
    """``submit --dry-run``: the manifest, no client made (ops/cli.py calls it before any)."""
    if args.workload == "job":
        from ops.job_cli import job_dry_run_comments

        prepared = args.prepared
        return print_manifest(prepared.manifest, out, json_mode=args.json, comments=job_dry_run_comments(prepared))
    from ops import render as renderer

    manifest = (render_fn or renderer.render)(args.workload, config)
    meta = manifest["metadata"]
    return print_manifest(
        manifest,
        out,
        json_mode=args.json,
        comments=[f"dry run: {manifest['kind']} {meta.get('namespace', 'default')}/{meta['name']} is not applied"],
    )


def run_submit(command: Command, render_fn: Any) -> int:
    """``submit training`` and ``submit inference``: apply the manifest and follow it."""
    from ops import render as renderer
    from ops.submit import Follower, Target, apply, reattach_command

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
            msg = (
                f"interrupted while applying {kind} {namespace}/{name}; it may or may not exist now.\n"
                f"  check:     kubectl -n {namespace} get {kind.lower()} {name}\n"
                f"  reattach:  {reattach_command(args.workload, config.name)}"
            )
            follower.emit(msg if follower.json_mode else "\n" + msg, event="interrupted")
            return EXIT_INTERRUPTED
    if args.no_follow:
        follower.emit(
            f"not following; watch it with: {command.prog} submit {args.workload} --env {config.name} --attach"
        )
        return EXIT_OK
    return follower.run()
