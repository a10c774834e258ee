"""The default environment, as kubectl's current context: ``--env NAME`` on the command line, else
``$HPRAY_ENV``, else the name ``hpray env use NAME`` wrote into the context file
(``$XDG_CONFIG_HOME/hpray/context``, default ``~/.config/hpray/context``)."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path

from ops.errors import UsageError

ENV_VARIABLE = "HPRAY_ENV"


def context_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "hpray" / "context"


@dataclass(frozen=True)
class Default:
    name: str
    source: str  # "$HPRAY_ENV" or the context file's path


def default_env() -> Default | None:
    """The environment a command without ``--env`` acts on, and where it was set; None when unset."""
    value = os.environ.get(ENV_VARIABLE, "").strip()
    if value:
        return Default(value, f"${ENV_VARIABLE}")
    path = context_file()
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return Default(text.splitlines()[0].strip(), str(path)) if text else None


def suggestion(word: str, known: list[str]) -> str:
    """``; did you mean 'status'?`` for a mistyped ``word``, else ``""``."""
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_known(name: str, known: list[str], where: str) -> None:
    if name not in known:
        raise UsageError(
            f"{where}: unknown environment {name!r}{suggestion(name, known)} (known: {', '.join(known)})",
            f"name one of them: hpray env use {known[0] if known else 'NAME'}",
        )


def use(name: str, known: list[str]) -> Path:
    """``hpray env use NAME``: write the context file; its path."""
    check_known(name, known, "env use")
    path = context_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(name + "\n")
    return path
