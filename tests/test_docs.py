"""The README and the documentation site teach commands that work: every `make` target, `ops`
command line, workload kind, environment and benchmark flag they show exists in the code."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from config import known_environments
from manifests.__main__ import kinds
from ops.cli import build_parser
from ops.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Placeholders the pages use for "your environment".
PLACEHOLDER_ENVS = {"NAME", "ENV"}


def _code(text: str) -> list[str]:
    """The code in a Markdown page: each line of a fenced block, each inline code span."""
    code, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            code.append(line)
        else:
            code += re.findall(r"`([^`]+)`", line)
    return code


def _matches(pattern: str) -> list[tuple[str, tuple[str, ...]]]:
    """(page, groups) for every match of ``pattern`` in the code of the pages."""
    return [
        (str(page.relative_to(ROOT)), m.groups())
        for page in PAGES
        for code in _code(page.read_text())
        for m in re.finditer(pattern, code)
    ]


# The rest of a command line: a shell comment or a line continuation ends it.
REST = r"([^#\\]*)"


def test_readme_is_short_and_shows_the_deploy_path_in_order():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    steps = [
        "make synth",
        "make test",
        "cdk bootstrap",
        "hpray preflight",
        "cdk deploy",
        "aws eks update-kubeconfig",
        "hpray submit",
        "cdk destroy",
    ]
    positions = [text.find(step) for step in steps]
    assert -1 not in positions, [s for s, p in zip(steps, positions, strict=True) if p == -1]
    assert positions == sorted(positions)


MAKE_TARGETS = set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))


@pytest.mark.parametrize(("page", "groups"), _matches(r"^\s*make ([a-z][\w-]*)\b(?!=)"))
def test_make_targets_exist(page, groups):
    assert groups[0] in MAKE_TARGETS, f"{page}: `make {groups[0]}`: the Makefile has no such target"


@pytest.mark.parametrize(("page", "groups"), _matches(r"python3? -m ops" + REST))
def test_ops_command_lines_parse(page, groups):
    args = groups[0]
    argv = ["dev" if a in PLACEHOLDER_ENVS else a for a in shlex.split(args)]
    if argv in ([], ["--help"]) or "..." in argv:
        return
    try:
        build_parser().parse_args(argv)
    except (SystemExit, argparse.ArgumentError, UsageError) as err:
        pytest.fail(f"{page}: `python -m ops {args}` does not parse: {err}")


@pytest.mark.parametrize(("page", "groups"), _matches(r"(?:^|[\s(])hpray " + REST))
def test_hpray_command_lines_parse(page, groups):
    """Every whole `hpray ... --env NAME` line a page shows parses (the pages teach the installed
    command); a shell redirect or pipe ends it, and what follows -- is a job's own command."""
    from ops.usage import split_command

    args = re.split(r"\s[>|;]|&&", groups[0])[0]
    try:
        words = shlex.split(args)
    except ValueError:
        return
    if "--env" not in words or "..." in words or any(w.startswith("[") for w in words):
        return  # prose, or a synopsis with optional parts
    argv = split_command(["dev" if a in PLACEHOLDER_ENVS or a == "<name>" else a for a in words])[0]
    try:
        build_parser("hpray").parse_args(argv)
    except (SystemExit, argparse.ArgumentError, UsageError) as err:
        pytest.fail(f"{page}: `hpray {args}` does not parse: {err}")


def test_the_pages_name_the_cli_hpray():
    """One name: the pages say `hpray`, never `ops X` or `python -m ops X` (how to run it from a
    checkout without installing it is said once, in the README and the operations page)."""
    found = [
        (page, code)
        for page, groups in _matches(r"((?:python3? -m |^|\s)ops [a-z][\w-]*)")
        for code in groups
        if not code.strip().startswith("ops/")
    ]
    assert found == []


@pytest.mark.parametrize(("page", "groups"), _matches(r"python3? -m manifests render" + REST))
def test_workload_renders_exist(page, groups):
    argv = shlex.split(groups[0])
    if not argv:
        return
    assert argv[0] in kinds(), f"{page}: unknown workload {argv[0]!r}; known: {kinds()}"
    env = argv[argv.index("--env") + 1]
    assert env in known_environments() or env in PLACEHOLDER_ENVS, f"{page}: unknown environment {env!r}"


@pytest.mark.parametrize(("page", "groups"), _matches(r"(?:-c env=|ENV=|--env )([A-Za-z]\w*)"))
def test_environments_exist(page, groups):
    assert groups[0] in known_environments() or groups[0] in PLACEHOLDER_ENVS, (
        f"{page}: unknown environment {groups[0]!r}"
    )


@pytest.mark.parametrize(("page", "groups"), _matches(r"\bbench/(\w+\.py)" + REST))
def test_benchmark_scripts_and_flags_exist(page, groups):
    script = ROOT / "bench" / groups[0]
    assert script.exists(), f"{page}: no {script.relative_to(ROOT)}"
    source = script.read_text()
    for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", groups[1]):
        assert f'"{flag}"' in source, f"{page}: {script.name} has no option {flag}"


FINETUNE = ROOT / "docs" / "finetune.md"


def _finetune_commands(prefix: str) -> list[list[str]]:
    """The command lines of docs/finetune.md that start with ``prefix`` (continuations joined,
    comments dropped)."""
    lines, out, pending = _code(FINETUNE.read_text()), [], ""
    for line in lines:
        pending += line.rstrip("\\").strip() + " "
        if line.rstrip().endswith("\\"):
            continue
        text, pending = pending.split("#")[0].strip(), ""
        if text.startswith(prefix):
            out.append(shlex.split(text[len(prefix) :]))
    return out


@pytest.mark.parametrize(
    "argv", [a for a in _finetune_commands("hpray ") if "--dry-run" in a and not PLACEHOLDER_ENVS & set(a)]
)
def test_finetune_page_dry_runs_print_their_manifests(argv, monkeypatch, tmp_path):
    """Every dry run on the fine-tuning page on a named environment prints a manifest, with no
    AWS credentials (the batch-inference lines' ENV needs the page's ``batch_inference:`` block:
    test_finetune_page_batch_inference_section_renders; test_hpray_command_lines_parse parses them)."""
    import io

    import yaml

    from ops.cli import main

    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    out, err = io.StringIO(), io.StringIO()
    assert main(argv, out=out, err=err, prog="hpray") == 0, err.getvalue()
    manifest = yaml.safe_load(out.getvalue())
    assert manifest["kind"] in ("RayJob", "RayService")


@pytest.mark.parametrize("argv", _finetune_commands(".venv/bin/python -m manifests "))
def test_finetune_page_renders_run(argv):
    import contextlib
    import io

    from manifests.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) in (0, None)
    assert "kind: RayService" in out.getvalue() or "kind: RayJob" in out.getvalue()


def test_finetune_page_export_command_parses():
    """The page's ``python -m workloads.export`` line takes the export's own options."""
    (argv,) = _finetune_commands(".venv/bin/python -m workloads.export ")
    parser_args = {a for a in argv if a.startswith("--")}
    source = (ROOT / "workloads" / "export" / "__main__.py").read_text()
    assert parser_args and all(f'"{a}"' in source for a in parser_args)
    assert len(_finetune_commands("hpray ")) >= 5


def test_finetune_page_batch_inference_section_renders():
    """The page's ``batch_inference:`` block, on prod, renders the batch inference RayJob."""
    import yaml

    from config import load_environment
    from manifests import batch_inference

    text = FINETUNE.read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if b.startswith("batch_inference:"))
    env = load_environment("prod")
    data = env.model_dump()
    data.update(yaml.safe_load(block))
    job = batch_inference.render(type(env).model_validate(data))
    assert job["kind"] == "RayJob" and "workloads.batch_inference" in job["spec"]["entrypoint"]


def test_the_documented_debian_packages_are_the_ones_make_installs():
    """README and "Install and synthesize" list every package of the Makefile's APT_PACKAGES (issue 37: zsh, fish)."""
    packages = re.search(r"^APT_PACKAGES := (.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert packages is not None
    wanted = packages.group(1).split()
    readme = " ".join((ROOT / "README.md").read_text().split())
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    install = " ".join(deploy.split())
    command = re.search(r"sudo apt-get install ([\w\s-]+)`", install)
    assert command is not None
    assert command.group(1).split() == wanted
    table_row = next(line for line in deploy.splitlines() if "(`apt-get`, as root)" in line)
    for package in wanted:
        assert re.search(rf"\b{re.escape(package)}\b", readme), package
        assert re.search(rf"\b{re.escape(package)}\b", table_row), package


def _rendered_names(env: str) -> set[str]:
    """The names of the RayJobs and RayServices `hpray submit` renders for ``env``."""
    from config import ConfigError
    from manifests import registry
    from manifests.check import load_checked

    config = load_checked(env)
    names = set()
    for w in registry.workloads():
        try:
            names.add(w.render(config)["metadata"]["name"])
        except ConfigError:
            continue  # not rendered in this environment (dev's LLM service is off)
    return names


def test_the_samples_name_what_the_render_produces():
    """A sample's RayJob or RayService of ray-workloads (`RayJob ray-workloads/NAME`, `kubectl -n
    ray-workloads get rayjob NAME`) is one the render produces for dev (issue 37: a sample named a
    RayJob the render never made)."""
    names = _rendered_names("dev")
    found = _matches(r"(?:(?:RayJob|RayService) ray-workloads/|get (?:rayjob|rayservice) )([a-z][a-z0-9-]+)")
    assert found, "the pages show no workload by name"
    wrong = [(page, name) for page, (name,) in found if name not in names and not name.startswith("my-")]
    assert wrong == [], f"rendered for dev: {sorted(names)}"
