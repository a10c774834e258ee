"""The command line's own errors (exit 2): a parser that raises them instead of exiting, the value
types of counted options, and the message for an option a command does not take."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

from ops.errors import UsageError


class Parser(argparse.ArgumentParser):
    """``argparse`` that raises :class:`UsageError` (``error: ...`` and a fix naming the
    command's ``--help``), so the CLI prints it like its other errors, on its own stream."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, f"see {self.prog} --help")


def positive_int(text: str) -> int:
    """A count (GPUs, nodes, lines): a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
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
