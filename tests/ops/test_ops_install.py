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
from ops.commands.completion import bash_script
from ops.errors import UsageError

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
        "artifacts",
        "config",
        "sizing",
        "workloads",
        "workloads.*",
        "manifests",
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
    assert complete(["hpray", "submit", ""]) == ["training", "inference", "batch-inference", "pretokenize", "job"]
    assert complete(["hpray", "submit", "job", "--env", "d"]) == ["dev"]
    assert "--working-dir" in complete(["hpray", "submit", "job", "--w"])
    assert complete(["hpray", "logs", "x", "--f"]) == ["--follow"]
    # After --, the words are the job's own command: nothing to complete.
    assert complete(["hpray", "submit", "job", "--", "pyth"]) == []
    assert complete(["hpray", "submit", "job", "--", "python", "--w"]) == []


# What a `pip install .` carries: the packages of pyproject.toml, nothing else of the checkout.
WHEEL_SOURCES = (
    "pyproject.toml",
    "README.md",
    "ops",
    "artifacts",
    "config",
    "sizing",
    "workloads",
    "manifests",
    "review",
)


@pytest.fixture(scope="module")
def installed_hpray(tmp_path_factory):
    """The wheel built from a copy of the distribution's sources (offline: no build isolation, no
    dependencies fetched), installed into a fresh venv whose dependencies come from this venv's
    site-packages through a .pth line (a path, not a site dir: no editable hook of this checkout)."""
    import site
    import sys
    import sysconfig
    import venv

    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    for name in WHEEL_SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(
            ROOT / name,
            src / name,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}),
        )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (work / "dist").glob("hpray-*.whl")
    env_dir = work / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(env_dir), "platbase": str(env_dir)}))
    (purelib / "main-venv-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [*pip, "--python", str(env_dir / "bin" / "python"), "install", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return env_dir / "bin" / "hpray", purelib, wheel


def _run_installed(
    hpray: Path, args: list[str], tmp_path: Path, *, cwd: Path | None = None, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("AWS_", "HPRAY_", "PYTHON"))}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    env.update(extra_env)
    # Run from an empty folder (or ``cwd``): nothing of the checkout is importable from the working
    # directory (a console script's sys.path starts with its own bin/, never the current folder).
    return subprocess.run(
        [str(hpray), *args], cwd=cwd or tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_wheel_carries_the_environments_and_the_data_files(installed_hpray):
    import zipfile

    _, _, wheel = installed_hpray
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = {
        p.relative_to(ROOT).as_posix()
        for package in ("config", "review")
        for p in (ROOT / package).rglob("*")
        if p.is_file() and p.suffix in (".yaml", ".json")
    }
    assert {"config/dev.yaml", "config/staging.yaml", "config/prod.yaml", "config/prices.yaml"} <= tracked
    assert tracked <= names


def test_the_installed_upgrade_imports_the_artifact_fetcher(installed_hpray, tmp_path):
    """`hpray upgrade` gets the pinned CRDs through artifacts/pinned.py: the wheel carries it."""
    hpray, purelib, _ = installed_hpray
    code = "import ops.upgrade.kuberay_crds, artifacts.pinned as p; print(p.__file__)"
    result = subprocess.run(
        [str(hpray.parent / "python"), "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{purelib / 'artifacts' / 'pinned.py'}\n"


def test_installed_hpray_has_a_version_and_finds_its_environments(installed_hpray, tmp_path):
    hpray, purelib, _ = installed_hpray
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    result = _run_installed(hpray, ["--version"], tmp_path)
    assert result.returncode == 0, result.stderr
    # The environments of the installed package, not of this checkout.
    assert result.stdout == f"hpray {version} (environments: {purelib / 'config'})\n"


def test_installed_hpray_status_reaches_the_credentials_error(installed_hpray, tmp_path):
    hpray, _, _ = installed_hpray
    result = _run_installed(hpray, ["status", "--env", "dev"], tmp_path)
    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith("error: no AWS credentials found"), result.stderr
    assert "Traceback" not in result.stderr


def test_installed_hpray_takes_the_users_config_dir(installed_hpray, tmp_path):
    hpray, _, _ = installed_hpray
    mine = tmp_path / "my-config"
    mine.mkdir()
    shutil.copy2(ROOT / "config" / "dev.yaml", mine / "team.yaml")
    result = _run_installed(hpray, ["status", "--env", "team", "--config-dir", str(mine)], tmp_path)
    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith("error: no AWS credentials found"), result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    result = _run_installed(hpray, ["status", "--env", "dev", "--config-dir", str(empty)], tmp_path)
    assert (result.returncode, result.stderr) == (
        2,
        f"error: --config-dir {empty}: no environment file (NAME.yaml) in it\n"
        "fix:   name the folder of your environment files\n",
    )


def test_version_from_the_checkout(capsys):
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as info:
        main(["--version"], prog="hpray")
    assert info.value.code == 0
    assert capsys.readouterr().out == f"hpray {version} (environments: {ROOT / 'config'})\n"


def test_the_config_dir_from_the_environment_and_its_errors(tmp_path, monkeypatch, capsys):
    from ops.usage import CONFIG_DIR_ENV, config_dir_of

    mine = tmp_path / "envs"
    mine.mkdir()
    (mine / "team.yaml").write_text((ROOT / "config" / "dev.yaml").read_text())
    monkeypatch.setenv(CONFIG_DIR_ENV, str(mine))
    assert config_dir_of(["status", "--env", "team"]) == mine
    # --config-dir wins over the variable.
    assert config_dir_of(["status", "--env", "dev", "--config-dir", str(ROOT / "config")]) == ROOT / "config"
    with pytest.raises(UsageError) as info:
        config_dir_of(["status", "--env", "dev", "--config-dir", str(mine / "team.yaml")])
    assert info.value.exit_code == 2
    assert info.value.message == f"--config-dir {mine / 'team.yaml'}: not a directory"
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(UsageError) as info:
        config_dir_of(["status", "--env", "dev"])
    assert info.value.message == f"$HPRAY_CONFIG_DIR {tmp_path / 'nowhere'}: not a directory"


def test_installed_hpray_dry_run_names_the_image_the_synthesized_template_deploys(
    installed_hpray, synthesized, tmp_path
):
    """The image of a job is the image the environment deployed: in the checkout, the installed
    hpray's dry run names the URI the synthesized cluster stack writes for it (never a hash of the
    site-packages it runs from), and says where it came from."""
    from tests.stacks.test_cluster_stack import deployed_image_config_map

    hpray, _, _ = installed_hpray
    _, _, stacks = synthesized("dev")
    deployed = deployed_image_config_map(stacks.cluster)["data"]["uri"]
    for workload in ("training", "inference"):
        result = _run_installed(hpray, ["submit", workload, "--env", "dev", "--dry-run"], tmp_path, cwd=ROOT)
        assert result.returncode == 0, result.stderr
        images = {line.strip() for line in result.stdout.splitlines() if line.strip().startswith("image: ")}
        assert images == {f"image: {deployed}"}, images
        assert f"# image: computed from the checkout at {ROOT} (no cluster reached" in result.stdout
    # Outside a checkout there is nothing to compute it from: one clear error, never a site-packages hash.
    result = _run_installed(hpray, ["submit", "training", "--env", "dev", "--dry-run"], tmp_path)
    assert result.returncode == 2, result.stdout
    assert "training.image: not set, and no checkout of this repository here to compute it from" in result.stderr
    assert "hpray-workloads-image" in result.stderr
    assert "image: " not in result.stdout


def _checkout_copy(where: Path) -> Path:
    """A user's clone: the CDK app's markers, the image's build context and config/."""
    where.mkdir()
    for name in ("cdk.json", "app.py", ".dockerignore"):
        shutil.copy2(ROOT / name, where / name)
    for name in ("config", "workloads"):
        shutil.copytree(ROOT / name, where / name, ignore=shutil.ignore_patterns("__pycache__"))
    return where


def test_installed_hpray_reads_the_checkouts_config_and_warns_of_the_bundled_copy(installed_hpray, tmp_path):
    hpray, purelib, _ = installed_hpray
    checkout = _checkout_copy(tmp_path / "clone")
    dev = checkout / "config" / "dev.yaml"
    dev.write_text(dev.read_text().replace("active_deadline_seconds: 21600", "active_deadline_seconds: 7200"))
    inside = checkout / "config"
    version = _run_installed(hpray, ["--version"], tmp_path, cwd=inside)
    assert version.stdout.endswith(f"(environments: {checkout / 'config'})\n"), version.stdout
    result = _run_installed(hpray, ["submit", "training", "--env", "dev", "--dry-run"], tmp_path, cwd=inside)
    assert result.returncode == 0, result.stderr
    assert "activeDeadlineSeconds: 7200" in result.stdout
    assert f"# environment: {dev}\n" in result.stdout  # which folder it read
    assert result.stderr == (
        f"warning: environment dev read from {dev}; the copy bundled with this hpray "
        f"({purelib / 'config' / 'dev.yaml'}) differs (reinstall hpray to update it)\n"
    )
    # HPRAY_CONFIG_DIR wins over the checkout: the bundled copy, unchanged, renders its own value.
    result = _run_installed(
        hpray,
        ["submit", "training", "--env", "dev", "--dry-run"],
        tmp_path,
        cwd=inside,
        HPRAY_CONFIG_DIR=str(purelib / "config"),
    )
    assert result.returncode == 0, result.stderr
    assert "activeDeadlineSeconds: 21600" in result.stdout
    assert result.stderr == ""


def test_installed_pin_base_never_writes_the_installed_copy(installed_hpray, tmp_path):
    hpray, purelib, _ = installed_hpray
    before = (purelib / "workloads" / "Dockerfile").read_bytes()
    result = _run_installed(hpray, ["images", "pin-base", "--registry-url", "http://127.0.0.1:9"], tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        f"error: {purelib / 'workloads' / 'Dockerfile'} is the copy installed with hpray, not a checkout's"
    ), result.stderr
    assert (purelib / "workloads" / "Dockerfile").read_bytes() == before
    # In a checkout: its own Dockerfile is the one named (and, with Docker Hub, written).
    checkout = _checkout_copy(tmp_path / "clone")
    result = _run_installed(
        hpray,
        ["images", "pin-base", "--registry-url", "http://127.0.0.1:9", "--auth-url", "http://127.0.0.1:9"],
        tmp_path,
        cwd=checkout,
    )
    assert result.returncode == 1, result.stderr
    assert str(purelib) not in result.stderr


def test_installed_hpray_hints_say_hpray(installed_hpray, tmp_path):
    """One name: what the installed command prints to its user says `hpray`, never `python -m ops`."""
    hpray, _, _ = installed_hpray
    for args in (["--help"], ["submit", "--help"], ["submit", "job", "--help"], ["rollout", "llm", "--help"]):
        result = _run_installed(hpray, args, tmp_path, cwd=ROOT)
        assert result.returncode == 0, result.stderr
        assert "python -m ops" not in result.stdout and "hpray" in result.stdout, args
    result = _run_installed(hpray, ["submit", "job", "--env", "dev", "--attach"], tmp_path, cwd=ROOT)
    assert (result.returncode, result.stderr) == (
        2,
        "error: --attach needs --name NAME for a job\nfix:   list the jobs with: hpray jobs --env dev\n",
    )
    result = _run_installed(hpray, ["jobs"], tmp_path, cwd=ROOT, HPRAY_ENV="stagin")
    assert result.returncode == 2
    assert result.stderr.startswith("error: $HPRAY_ENV: unknown environment 'stagin'; did you mean 'staging'?")
