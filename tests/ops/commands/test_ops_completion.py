"""The completion scripts, run by the real shells: what each offers for a partial command line."""

from __future__ import annotations

import io
import shutil
import subprocess

import pytest

from ops.cli import build_parser, main
from ops.commands.completion import bash_script, fish_script, zsh_script

SCRIPT = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}


def shell(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"needs {name} (Debian package {name}; `make deps` installs it)")
    return path


def complete(sh: str, words: list[str]) -> list[str]:
    """What ``sh`` offers for ``words`` (the last is being typed), from the generated script."""
    script = SCRIPT[sh](build_parser("hpray"), "hpray")
    quoted = " ".join(f"'{w}'" for w in words)
    if sh == "bash":
        program = f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _hpray_complete; printf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
        argv = [shell("bash"), "--noprofile", "--norc", "-c", program]
    elif sh == "zsh":
        # compadd and _files are zsh's completion builtins; stand-ins print what would be offered
        # (compadd matches the typed prefix, as zsh does).
        program = (
            f"{script}\n"
            'compadd() { [[ $1 == -- ]] && shift; local w; for w in "$@"; do [[ $w == ${cur}* ]] && print -r -- $w; done }\n'
            "_files() { print -r -- '<files>' }\n"
            f"words=({quoted}); CURRENT={len(words)}; _hpray\n"
        )
        argv = [shell("zsh"), "-f", "-c", program]
    else:
        line = " ".join(words)
        argv = [shell("fish"), "--no-config", "-c", f"{script}\ncomplete -C {line!r}"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.stderr == "", result.stderr
    return [w.split("\t")[0] for w in result.stdout.splitlines() if w]


@pytest.mark.parametrize("sh", ["bash", "zsh", "fish"])
def test_each_shell_completes_commands_workloads_options_and_choices(sh):
    assert complete(sh, ["hpray", "s"]) == ["status", "stop", "submit"]
    assert complete(sh, ["hpray", "d"]) == ["dashboard", "describe"]
    assert sorted(complete(sh, ["hpray", "submit", ""])) == [
        "batch-inference",
        "inference",
        "job",
        "pretokenize",
        "training",
    ]
    assert complete(sh, ["hpray", "submit", "job", "--env", "d"]) == ["dev"]
    assert complete(sh, ["hpray", "submit", "job", "--dry"]) == ["--dry-run"]
    assert complete(sh, ["hpray", "submit", "job", "--runt"]) == [
        "--runtime-env",
        "--runtime-env-json",
    ]  # both, as `ray job submit`
    assert complete(sh, ["hpray", "logs", "x", "--p"]) == ["--pod", "--previous", "--profile"]
    assert sorted(complete(sh, ["hpray", "completion", ""])) == ["bash", "fish", "zsh"]
    assert complete(sh, ["hpray", "upgrade", ""]) == ["plan"]
    # an option of another command is not offered: submit training takes no --gpus
    assert complete(sh, ["hpray", "submit", "training", "--gp"]) == []
    # after --, the words are the job's own command: nothing
    assert complete(sh, ["hpray", "submit", "job", "--", "python", "--w"]) == []


def test_path_options_complete_file_names(tmp_path):
    (tmp_path / "env.yaml").write_text("pip: []\n")
    assert complete("zsh", ["hpray", "submit", "job", "--runtime-env", ""]) == ["<files>"]
    program = f"cd {tmp_path}; " + bash_script(build_parser("hpray"), "hpray")
    program += "\nCOMP_WORDS=(hpray submit job --runtime-env e); COMP_CWORD=4; _hpray_complete; echo ${COMPREPLY[@]}"
    result = subprocess.run([shell("bash"), "--norc", "-c", program], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["env.yaml"]


@pytest.mark.parametrize("sh", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_the_shell_accepts(sh, tmp_path):
    out = io.StringIO()
    assert main(["completion", sh], prog="hpray", out=out) == 0
    path = tmp_path / f"hpray.{sh}"
    path.write_text(out.getvalue())
    check = {"bash": ["-n"], "zsh": ["-n"], "fish": ["--no-execute"]}[sh]
    assert subprocess.run([shell(sh), *check, str(path)], capture_output=True, text=True).returncode == 0


def test_zsh_registers_the_function_from_fpath_and_when_sourced(tmp_path):
    """With zsh's own completion system (compinit): the file in $fpath is found by its #compdef
    line, and a sourced script registers itself with compdef."""
    (tmp_path / "zfunc").mkdir()
    (tmp_path / "zfunc" / "_hpray").write_text(zsh_script(build_parser("hpray"), "hpray"))
    init = "autoload -U compinit && compinit -u -D"
    for program in (
        f"fpath=({tmp_path / 'zfunc'} $fpath); {init}; print -r -- ${{_comps[hpray]}}",
        f"{init}; source {tmp_path / 'zfunc' / '_hpray'}; print -r -- ${{_comps[hpray]}}",
    ):
        result = subprocess.run(
            [shell("zsh"), "-f", "-c", program],
            capture_output=True,
            text=True,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
            timeout=60,
        )
        assert (result.stdout, result.stderr) == ("_hpray\n", "")
