"""Where ``hpray`` finds the environments: ``--config-dir``, ``$HPRAY_CONFIG_DIR``, or the checkout's config/."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from config import known_environments
from config.loader import CONFIG_DIR
from ops.errors import UsageError

CONFIG_DIR_ENV = "HPRAY_CONFIG_DIR"


def config_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config-dir",
        metavar="DIR",
        type=Path,
        help=f"folder of the environment files NAME.yaml (default: ${CONFIG_DIR_ENV}, else {CONFIG_DIR})",
    )


def config_dir_of(argv: Sequence[str]) -> Path:
    """The environments' folder: --config-dir anywhere on the command line, else $HPRAY_CONFIG_DIR,
    else the config/ package this command runs from. A UsageError (exit 2) when it holds no environment."""
    pre = argparse.ArgumentParser(add_help=False)
    config_dir_option(pre)
    given = pre.parse_known_args([a for a in argv if a != "--help" and a != "-h"])[0].config_dir
    chosen = given or (Path(os.environ[CONFIG_DIR_ENV]) if os.environ.get(CONFIG_DIR_ENV) else None)
    if chosen is None:
        return CONFIG_DIR
    flag = "--config-dir" if given else f"${CONFIG_DIR_ENV}"
    if not chosen.is_dir():
        raise UsageError(f"{flag} {chosen}: not a directory", "name the folder of your environment files NAME.yaml")
    if not known_environments(chosen):
        raise UsageError(
            f"{flag} {chosen}: no environment file (NAME.yaml) in it", "name the folder of your environment files"
        )
    return chosen
