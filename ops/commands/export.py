"""``export --env E [--checkpoint STEP]``: the training run's checkpoint (the newest that
verifies, or step STEP) written as a verified Hugging Face folder at ``training.export_path``
(default ``<storage>/<run_name>/export``), the folder the LLM service serves. It applies and
follows the export RayJob (manifests/export.py, the registry's ``export`` workload, with
``--step`` where a checkpoint is named), as ``submit`` does; ``--dry-run`` prints it."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, TextIO

from config.environment import EnvironmentConfig
from ops.context import Command, CommandSpec, RenderFn
from ops.usage import CommandLine, positive_float, positive_int


def register(sub: Any, cli: CommandLine) -> None:
    prog, formatter = cli.prog, cli.formatter
    p = sub.add_parser(
        "export",
        prog=f"{prog} export",
        help="export the training run's checkpoint as a Hugging Face folder and follow it",
        description=(
            "Write the training run's newest verified checkpoint (or --checkpoint STEP) as a Hugging\n"
            "Face folder at training.export_path (default <storage>/<run_name>/export), verified\n"
            "against its manifest.json: what the LLM service (inference.llm.model_source) and the\n"
            "generation service serve. Renders the export RayJob (`python -m manifests render\n"
            "export`), applies and follows it; --dry-run prints it and calls nothing.\n\n"
            f"examples:\n  {prog} export --env dev\n  {prog} export --env prod --checkpoint 20000 --dry-run"
        ),
        formatter_class=formatter,
    )
    cli.common(p, kube=True)
    p.add_argument(
        "--checkpoint", type=positive_int, metavar="STEP", help="the checkpoint of this step (default: newest verified)"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--no-follow", action="store_true", help="apply and return at once")
    mode.add_argument(
        "--dry-run", action="store_true", help="print the RayJob (YAML; JSON with --json) and exit; nothing is applied"
    )
    p.add_argument(
        "--poll-seconds", type=positive_float, default=5.0, metavar="S", help="seconds between polls (default: 5.0)"
    )
    p.add_argument(
        "--timeout-minutes", type=positive_float, default=None, metavar="M", help="stop following after M minutes"
    )


def _render_fn(step: int | None) -> RenderFn:
    def render(kind: str, config: EnvironmentConfig) -> dict[str, Any]:
        from manifests import export

        return export.render(config, step)

    return render


def _as_submit(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "workload": "export", "attach": False})


def dry_run(config: EnvironmentConfig, args: argparse.Namespace, out: TextIO, render_fn: RenderFn | None) -> int:
    from ops.commands import submit

    return submit.dry_run(config, _as_submit(args), out, _render_fn(args.checkpoint))


def run(command: Command) -> int:
    from ops.commands import submit

    return submit.run_submit(
        dataclasses.replace(command, args=_as_submit(command.args), render_fn=_render_fn(command.args.checkpoint))
    )


COMMAND = CommandSpec("export", register, run=run, dry_run=dry_run)
