"""The command line's plumbing, shared by every command of ops/commands/: the parser that raises
:class:`UsageError` (exit 2) instead of exiting, :class:`CommandLine` (what a command registers its
parser with: the program name, the help layout and the options every command shares), where the
environments are (``--config-dir``), the value types of counted options, and the message for an
option a command does not take."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from config import known_environments
from config.loader import CONFIG_DIR, checkout_config_dir
from ops.errors import UsageError

CONFIG_DIR_ENV = "HPRAY_CONFIG_DIR"
# -o FORMAT, as kubectl's: json (= --json), yaml, wide.
OUTPUTS = ("json", "yaml", "wide")


class Parser(argparse.ArgumentParser):
    """``argparse`` that raises :class:`UsageError` (``error: ...`` and a fix naming the
    command's ``--help``), so the CLI prints it like its other errors, on its own stream."""

    def error(self, message: str) -> NoReturn:
        # A mistyped command, workload or environment: the nearest one (difflib), as git and kubectl do.
        typo = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if typo:
            from ops.current_env import suggestion

            message += suggestion(typo.group(1), re.findall(r"'([^']*)'", typo.group(2)))
        raise UsageError(message, f"see {self.prog} --help")


class Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=100)


@dataclass(frozen=True)
class CommandLine:
    """What a command's ``register`` adds its parser with: ``prog`` (``hpray`` or ``python -m
    ops``), the environments' folder (the choices of ``--env``), and the shared options."""

    prog: str
    config_dir: Path = CONFIG_DIR
    formatter: type[argparse.HelpFormatter] = Formatter

    def common(self, parser: argparse.ArgumentParser, *, kube: bool) -> None:
        """``--env``, ``--config-dir``, ``--json``, ``--profile``; with ``kube`` also ``--kubeconfig`` and ``--context``."""
        envs = known_environments(self.config_dir)
        parser.add_argument(
            "--env",
            required=True,
            metavar="NAME",
            choices=envs,
            help=f"environment to act on: NAME.yaml in {self.config_dir} ({', '.join(envs)})",
        )
        config_dir_option(parser)
        parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of tables")
        parser.add_argument(
            "--output",
            "-o",
            choices=OUTPUTS,
            metavar="FORMAT",
            help="json (as --json), yaml (the JSON as YAML), or wide (tables with more columns)",
        )
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
                "--context",
                metavar="NAME",
                help="kubeconfig context to use (of --kubeconfig, else $KUBECONFIG or ~/.kube/config)",
            )

    def job_parser(
        self, sub: Any, name: str, help_: str, description: str, *, target: str | None, examples: list[str]
    ) -> Any:
        """A job command (``jobs``, ``describe``, ``logs``, ...): NAME (``target`` "required",
        "optional" or None), the common options and ``--namespace``."""
        from manifests.k8s import NAMESPACE

        p = sub.add_parser(
            name,
            prog=f"{self.prog} {name}",
            help=help_,
            formatter_class=self.formatter,
            description=description,
            epilog="examples:\n" + "".join(f"  {self.prog} {e}\n" for e in examples),
        )
        if target == "required":
            p.add_argument("name", metavar="NAME", help="the RayJob")
        elif target == "optional":
            p.add_argument(
                "name", metavar="NAME", nargs="?", help="RayJob or RayService (default: the only running one)"
            )
        self.common(p, kube=True)
        p.add_argument(
            "--namespace", "-n", metavar="NS", default=NAMESPACE, help="namespace of the jobs (default: %(default)s)"
        )
        return p


def config_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config-dir",
        metavar="DIR",
        type=Path,
        help=(
            f"folder of the environment files NAME.yaml (default: ${CONFIG_DIR_ENV}, else the config/ of the "
            f"checkout you are in, else {CONFIG_DIR})"
        ),
    )


def config_dir_of(argv: Sequence[str]) -> Path:
    """The environments' folder: --config-dir anywhere on the command line, else $HPRAY_CONFIG_DIR,
    else the config/ folder of the checkout the command runs in (the current folder or above),
    else the config/ package this command was installed with. A UsageError (exit 2) when it holds
    no environment."""
    pre = argparse.ArgumentParser(add_help=False)
    config_dir_option(pre)
    given = pre.parse_known_args([a for a in argv if a != "--help" and a != "-h"])[0].config_dir
    chosen = given or (Path(os.environ[CONFIG_DIR_ENV]) if os.environ.get(CONFIG_DIR_ENV) else None)
    if chosen is None:
        return checkout_config_dir() or CONFIG_DIR
    flag = "--config-dir" if given else f"${CONFIG_DIR_ENV}"
    if not chosen.is_dir():
        raise UsageError(f"{flag} {chosen}: not a directory", "name the folder of your environment files NAME.yaml")
    if not known_environments(chosen):
        raise UsageError(
            f"{flag} {chosen}: no environment file (NAME.yaml) in it", "name the folder of your environment files"
        )
    return chosen


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """``submit job ... -- python train.py --lr 3`` -> (the CLI's own arguments, the job's command)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def positive_int(text: str) -> int:
    """A count (GPUs, nodes, lines): a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def duration(text: str) -> int:
    """Seconds: ``5400``, ``5400s``, ``90m`` or ``6h``."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], units[text[-1]]) if text[-1:] in units else (text, 1)
    try:
        value = int(number) * unit
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration; allowed: SECONDS, or N followed by s, m or h"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1 s")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def subcommand_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every parser of the tree by its command path: () the top, ("submit", "job") a leaf."""
    found: dict[tuple[str, ...], Any] = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(subcommand_parsers(sub, (*path, name)))
    return found


def options_of(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def command_path(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, ...]:
    """The subcommand words ``args`` chose (``submit job``)."""
    path: tuple[str, ...] = ()
    current = parser
    while True:
        sub = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = getattr(args, sub.dest, None) if sub is not None else None
        if sub is None or chosen is None or chosen not in sub.choices:
            return path
        path, current = (*path, chosen), sub.choices[chosen]


def unrecognized(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> UsageError:
    """What to say about arguments the chosen command does not take: for an option another command
    has, which ones do (``--gpus`` is an option of ``submit job``, not of ``submit training``)."""
    path = command_path(parser, args)
    parsers = subcommand_parsers(parser)
    prog = parsers[path].prog
    option = next((e.split("=", 1)[0] for e in extras if e.startswith("-")), None)
    if option is None:
        return UsageError(f"{prog} takes no argument {extras[0]!r}", f"see {prog} --help")
    owners = sorted(" ".join(p) for p, sub in parsers.items() if p and p != path and option in options_of(sub))
    leaves = [o for o in owners if not any(other.startswith(o + " ") for other in owners)]
    # Which commands do take it, where that is a hint (not for --env, which nearly all take).
    where = f" (an option of: {', '.join(leaves)})" if 0 < len(leaves) <= 3 else ""
    return UsageError(f"{prog} does not take {option}{where}", f"see {prog} --help")


def bundled_differs(config_dir: Path, env: str) -> str | None:
    """A warning when ``env`` is read from ``config_dir`` while the installed package bundles its
    own, different copy (an installed hpray beside a checkout whose config was edited)."""
    bundled = CONFIG_DIR / f"{env}.yaml"
    mine = config_dir / f"{env}.yaml"
    if config_dir.resolve() == CONFIG_DIR or not bundled.is_file() or not mine.is_file():
        return None
    if all((CONFIG_DIR.parent / m).is_file() for m in ("cdk.json", "app.py")):
        return None  # running from a checkout: its config/ is no bundled copy
    if bundled.read_bytes() == mine.read_bytes():
        return None
    return (
        f"warning: environment {env} read from {mine}; the copy bundled with this hpray ({bundled}) differs "
        "(reinstall hpray to update it)"
    )
