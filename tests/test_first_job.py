"""docs/first-job.md, "Your first job": every command it shows runs as shown (issue 37). Those
that need AWS or the cluster run with --dry-run (submit) or are parsed with the default
environment the page set (jobs, logs, stop); `pipx install .` is the install test's
(tests/ops/test_ops_install.py builds the wheel and runs the installed hpray)."""

from __future__ import annotations

import io
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "first-job.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", PAGE.read_text(), re.DOTALL)


def commands() -> list[list[str]]:
    lines = [line.split("  #")[0].strip() for block in blocks("bash") for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line]


@pytest.fixture
def user(tmp_path, monkeypatch):
    """A new user's shell: no default environment yet, the job's folder written from the page."""
    monkeypatch.delenv("HPRAY_ENV", raising=False)
    monkeypatch.delenv("HPRAY_CONFIG_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (script,) = blocks("python")
    first, _, body = script.partition("\n")
    path = tmp_path / first.removeprefix("# ").strip()
    path.parent.mkdir(parents=True)
    path.write_text(body)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(argv: list[str]) -> tuple[int, str, str]:
    from ops.cli import main

    def refuse(*_a, **_k):
        raise AssertionError("the page's dry run made a client")

    out, err = io.StringIO(), io.StringIO()
    try:
        code = main(argv, out=out, err=err, prog="hpray", aws_factory=refuse, kube_factory=refuse)
    except SystemExit as exit_:  # --version
        code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_every_command_of_the_page_runs(user, capsys):
    from ops.cli import _parse

    seen = []
    for words in commands():
        seen.append(" ".join(words[:3]))
        if words[:2] == ["pipx", "install"]:
            continue  # tests/ops/test_ops_install.py: the wheel, installed in a fresh venv
        assert words[0] == "hpray", words
        argv = words[1:]
        if argv == ["--version"]:
            code, _, _ = run(argv)
            assert code == 0 and "(environments: " in capsys.readouterr().out
        elif argv[:1] == ["env"]:
            code, out, err = run(argv)
            assert (code, err) == (0, ""), err
            assert "dev" in out
        elif argv[:2] == ["submit", "job"]:
            dry = argv if "--dry-run" in argv else [*argv[: argv.index("--")], "--dry-run", *argv[argv.index("--") :]]
            code, out, err = run(dry)
            assert (code, err) == (0, ""), err
            manifest = yaml.safe_load(out)
            assert manifest["spec"]["entrypoint"] == "python train.py s3://my-team-datasets/corpus/"
            assert manifest["spec"]["activeDeadlineSeconds"] == 7200
            assert json.loads(manifest["spec"]["runtimeEnvYAML"])["working_dir"].startswith("s3://hpray-dev-")
            comments = [line for line in out.splitlines() if line.startswith("# ")]
            assert "# deadline: 7200 s (activeDeadlineSeconds)" in comments
            assert any(c.startswith("# image: computed from the checkout at ") for c in comments)
            assert any(c.startswith("# workers: 1 x ") and "(4 GPUs)" in c for c in comments), comments
        else:  # the cluster's commands: they parse, on the environment `env use` chose
            args, _ = _parse(argv, "hpray")
            assert args.env == "dev" and args.command in ("jobs", "logs", "stop"), argv
    assert seen[:2] == ["pipx install .", "hpray --version"]
    assert "hpray stop my-first-job-4f2a1c" in seen


def test_the_pages_config_lets_the_job_read_the_bucket():
    from config import parse_environment
    from constructs.flows import s3_locations
    from tests.ops.fakes import env_data

    (snippet,) = blocks("yaml")
    data = {**env_data("dev"), **yaml.safe_load(snippet)}
    config = parse_environment(data)
    assert ("my-team-datasets", "corpus/", False) in {(x.bucket, x.prefix, x.write) for x in s3_locations(config)}


def test_the_page_is_in_the_site():
    assert "first-job.md" in (ROOT / "mkdocs.yml").read_text()
