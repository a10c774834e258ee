"""``env [use NAME | list]``: the default environment of the commands that take ``--env`` (like
kubectl's current context): ``env use NAME`` writes it to ~/.config/hpray/context, ``$HPRAY_ENV``
overrides it, ``--env`` overrides both (ops/current_env.py)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ops.context import CommandSpec
from ops.usage import CommandLine, config_dir_option


def register(sub: Any, cli: CommandLine) -> None:
    p = sub.add_parser(
        "env",
        prog=f"{cli.prog} env",
        help="show or set the default environment (--env of every command)",
        formatter_class=cli.formatter,
        description=(
            "The environment a command acts on when --env is not given: $HPRAY_ENV, else the one\n"
            "`env use NAME` wrote to ~/.config/hpray/context ($XDG_CONFIG_HOME/hpray/context).\n\n"
            "examples:\n"
            f"  {cli.prog} env use dev      # from now on: {cli.prog} status == {cli.prog} status --env dev\n"
            f"  {cli.prog} env              # the default environment and where it is set\n"
            f"  {cli.prog} env list         # the environments of the config folder"
        ),
    )
    p.add_argument("action", metavar="ACTION", nargs="?", choices=["use", "list", "current"], default="current")
    p.add_argument("name", metavar="NAME", nargs="?", help="with use: the environment")
    config_dir_option(p)


def run_local(args: argparse.Namespace, out: TextIO, parser: argparse.ArgumentParser) -> int:
    from config import known_environments
    from ops import current_env
    from ops.errors import UsageError

    known = known_environments(args.config_dir_used)
    if args.action == "use":
        if not args.name:
            raise UsageError(
                "env use needs the environment's NAME", f"e.g. hpray env use {known[0] if known else 'dev'}"
            )
        path = current_env.use(args.name, known)
        print(f"default environment: {args.name} (written to {path}; $HPRAY_ENV and --env override it)", file=out)
        return 0
    if args.name:
        raise UsageError(f"env {args.action} takes no NAME", "hpray env use NAME sets the default")
    default = current_env.default_env()
    if args.action == "list":
        for name in known:
            print(f"{'*' if default and default.name == name else ' '} {name}", file=out)
        print(f"(environments of {args.config_dir_used})", file=out)
        return 0
    if default is None:
        print("no default environment: pass --env NAME, set HPRAY_ENV, or run hpray env use NAME", file=out)
        return 0
    print(f"{default.name} (from {default.source})", file=out)
    return 0


COMMAND = CommandSpec("env", register, run_local=run_local)
