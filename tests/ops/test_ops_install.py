"""`hpray` as an installed command: the pyproject entry point, and the bash completion script run
by a real bash."""

from __future__ import annotations

import importlib
import io
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from ops.cli import build_parser, main
from ops.completion import bash_script

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_declares_the_hpray_command():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["name"] == "hpray"
    target = data["project"]["scripts"]["hpray"]
    module, _, function = target.partition(":")
    assert callable(getattr(importlib.import_module(module), function))
    # Every package the command imports is in the distribution (config/<env>.yaml read from it).
    assert set(data["tool"]["setuptools"]["packages"]["find"]["include"]) >= {
        "ops",
        "config",
        "workloads",
        "workloads.*",
    }


def test_entry_point_names_itself_hpray(capsys):
    with pytest.raises(SystemExit):
        main(["--help"], prog="hpray")
    text = capsys.readouterr().out
    assert text.startswith("usage: hpray COMMAND --env NAME")
    assert "hpray submit job --env dev --working-dir . --gpus 4 -- python train.py" in text
    assert "7   the job's pods cannot be scheduled" in text


def test_completion_prints_the_script():
    out = io.StringIO()
    assert main(["completion", "bash"], prog="hpray", out=out) == 0
    assert out.getvalue().rstrip().endswith("complete -F _hpray_complete hpray")


def complete(words: list[str]) -> list[str]:
    """COMPREPLY of the generated function for the command line ``words`` (the last is being typed)."""
    script = bash_script(build_parser("hpray"), "hpray")
    line = " ".join(f"'{w}'" for w in words)
    program = f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _hpray_complete; printf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
    result = subprocess.run(
        [shutil.which("bash") or "/bin/bash", "--noprofile", "--norc", "-c", program],
        capture_output=True,
        text=True,
        check=True,
    )
    return [w for w in result.stdout.splitlines() if w]


def test_bash_completes_commands_options_and_choices():
    assert complete(["hpray", "s"]) == ["status", "stop", "submit"]
    assert complete(["hpray", "submit", ""]) == ["training", "inference", "job"]
    assert complete(["hpray", "submit", "job", "--env", "d"]) == ["dev"]
    assert "--working-dir" in complete(["hpray", "submit", "job", "--w"])
    assert complete(["hpray", "logs", "x", "--f"]) == ["--follow"]
    # After --, the words are the job's own command: nothing to complete.
    assert complete(["hpray", "submit", "job", "--", "pyth"]) == []
    assert complete(["hpray", "submit", "job", "--", "python", "--w"]) == []
