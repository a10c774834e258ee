"""``submit ... --dry-run`` prints the manifest and calls nothing; ``--runtime-env FILE`` puts
Ray's runtime_env fields into the RayJob (and its working_dir and excludes into the upload)."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
import yaml

from config import load_environment
from ops.cli import main
from ops.submit.runtime_env import load


@pytest.fixture
def no_clients():
    def refuse(*_a, **_k):
        raise AssertionError("a dry run made a client")

    return {"aws_factory": refuse, "kube_factory": refuse}


@pytest.fixture
def project(tmp_path):
    wd = tmp_path / "project"
    (wd / "data").mkdir(parents=True)
    (wd / "train.py").write_text("print('hi')\n")
    (wd / "data" / "big.bin").write_bytes(b"0" * 1000)
    return wd


def run(argv, **kwargs):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err, prog="hpray", **kwargs)
    return code, out.getvalue(), err.getvalue()


def test_submit_job_dry_run_prints_the_rayjob_with_the_runtime_env_and_calls_nothing(project, tmp_path, no_clients):
    env_file = tmp_path / "env.yaml"
    env_file.write_text(
        "pip: [datasets==3.1.0]\n"
        "env_vars: {NCCL_DEBUG: INFO, WANDB_MODE: online}\n"
        "excludes: [data]\n"
        "config: {setup_timeout_seconds: 1200}\n"
    )
    argv = ["submit", "job", "--env", "dev", "--working-dir", str(project), "--name", "hello"]
    argv += ["--runtime-env", str(env_file), "--env-var", "WANDB_MODE=offline", "--gpus", "8", "--dry-run"]
    code, out, err = run([*argv, "--", "python", "train.py", "--lr", "3e-4"], **no_clients)
    assert (code, err) == (0, "")
    comments = [line for line in out.splitlines() if line.startswith("#")]
    assert comments[0] == "# dry run: RayJob ray-workloads/hello is not applied, nothing is uploaded"
    assert comments[1].startswith(f"# working dir: {project} (1 files, ")  # data/ excluded by the file
    assert comments[2].startswith("# workers: 2 x ml.g5.12xlarge (8 GPUs); checkpoints: /fsx")
    manifest = yaml.safe_load(out)
    assert (manifest["kind"], manifest["metadata"]["name"]) == ("RayJob", "hello")
    assert manifest["spec"]["entrypoint"] == "python train.py --lr 3e-4"
    runtime_env = json.loads(manifest["spec"]["runtimeEnvYAML"])
    assert runtime_env["pip"] == ["datasets==3.1.0"]
    assert runtime_env["config"] == {"setup_timeout_seconds": 1200}
    assert runtime_env["env_vars"]["NCCL_DEBUG"] == "INFO"
    assert runtime_env["env_vars"]["WANDB_MODE"] == "offline"  # --env-var wins over the file
    assert runtime_env["env_vars"]["HPRAY_JOB"] == "hello"
    assert runtime_env["working_dir"].startswith("s3://") and "/jobs/hello/working-dir-" in runtime_env["working_dir"]
    assert "excludes" not in runtime_env  # applied to the upload, not sent to Ray
    code, out, _ = run([*argv, "--json", "--", "python", "train.py"], **no_clients)
    assert json.loads(out)["metadata"]["name"] == "hello"


def test_the_runtime_envs_working_dir_is_the_upload(project, tmp_path, no_clients):
    env_file = tmp_path / "env.json"
    env_file.write_text(json.dumps({"working_dir": str(project), "excludes": ["*.bin"]}))
    code, out, _ = run(
        [
            "submit",
            "job",
            "--env",
            "dev",
            "--runtime-env",
            str(env_file),
            "--name",
            "hello",
            "--dry-run",
            "--",
            "python",
        ],
        **no_clients,
    )
    assert code == 0
    assert f"# working dir: {project} (1 files, " in out


@pytest.mark.parametrize("workload", ["training", "inference"])
def test_submit_workload_dry_run_prints_what_submit_would_apply(workload, no_clients):
    from ops.submit.render import render

    code, out, err = run(["submit", workload, "--env", "dev", "--dry-run"], **no_clients)
    assert (code, err) == (0, "")
    assert out.startswith("# dry run: ")
    assert yaml.safe_load(out) == json.loads(json.dumps(render(workload, load_environment("dev"))))


def test_runtime_env_file_fields(tmp_path):
    path = tmp_path / "env.yaml"
    path.write_text("uv: {packages: [torch], uv_check: false}\nenv_vars: {A: '1'}\nworking_dir: .\nexcludes: [x]\n")
    env = load(path)
    assert env.fields == {"uv": {"packages": ["torch"], "uv_check": False}}
    assert (env.env_vars, str(env.working_dir), env.excludes) == ({"A": "1"}, ".", ("x",))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pip: [a]\nconda: {dependencies: [b]}\n", "pip, uv and conda exclude each other (Ray takes one)"),
        ("pip: requirements.txt\n", "pip must be a list of packages, or a mapping with packages: [...]"),
        ("container: {image: x}\n", "container is not for a RayJob"),
        ("working_dir: s3://bucket/code.zip\n", "working_dir 's3://bucket/code.zip' is remote"),
        ("- pip\n", "must hold a mapping of runtime_env fields; got list"),
        ("pip: [a\n", "not valid YAML: line 2, column 1: expected ',' or ']', but got '<stream end>'"),
    ],
)
def test_runtime_env_file_errors_name_the_file_and_the_field(tmp_path, text, message):
    from ops.errors import UsageError

    path = tmp_path / "env.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as info:
        load(path)
    assert info.value.message.startswith(f"--runtime-env {path}: {message}")


def test_the_zip_leaves_out_what_the_runtime_env_excludes(project, tmp_path):
    from ops.submit.job import package_working_dir

    names = zipfile.ZipFile(io.BytesIO(package_working_dir(project, excludes=("data",), top="j").data)).namelist()
    assert names == ["j/train.py"]


def test_submit_job_deadline_is_the_rayjobs_and_bounded_by_the_environment(project, no_clients):
    """--deadline (issue 37): the job's activeDeadlineSeconds, at most training.active_deadline_seconds."""
    argv = ["submit", "job", "--env", "dev", "--working-dir", str(project), "--name", "hello", "--dry-run"]
    code, out, err = run([*argv, "--deadline", "90m", "--", "python", "train.py"], **no_clients)
    assert (code, err) == (0, "")
    assert yaml.safe_load(out)["spec"]["activeDeadlineSeconds"] == 5400
    assert "# deadline: 5400 s (activeDeadlineSeconds)" in out.splitlines()
    limit = load_environment("dev").training.active_deadline_seconds
    code, out, _ = run([*argv, "--", "python", "train.py"], **no_clients)
    assert yaml.safe_load(out)["spec"]["activeDeadlineSeconds"] == limit
    code, out, err = run([*argv, "--deadline", str(limit + 1), "--", "python", "train.py"], **no_clients)
    assert (code, out) == (2, "")
    assert err.splitlines()[0] == (
        f"error: --deadline {limit + 1}: allowed 60 to {limit} seconds (training.active_deadline_seconds of "
        "dev.yaml is the most a job may run)"
    )
    code, _, err = run([*argv, "--deadline", "soon", "--", "python", "train.py"], **no_clients)
    assert code == 2 and "'soon' is not a duration; allowed: SECONDS, or N followed by s, m or h" in err


def test_submit_job_runtime_env_json_inline(project, no_clients):
    """--runtime-env-json, as `ray job submit` takes it, checked as a file is."""
    argv = ["submit", "job", "--env", "dev", "--working-dir", str(project), "--name", "hello", "--dry-run"]
    code, out, err = run(
        [*argv, "--runtime-env-json", '{"pip": ["emoji"], "env_vars": {"A": "1"}}', "--", "python", "train.py"],
        **no_clients,
    )
    assert (code, err) == (0, "")
    runtime_env = json.loads(yaml.safe_load(out)["spec"]["runtimeEnvYAML"])
    assert runtime_env["pip"] == ["emoji"] and runtime_env["env_vars"]["A"] == "1"
    code, _, err = run([*argv, "--runtime-env-json", '{"container": {}}', "--", "python", "train.py"], **no_clients)
    assert code == 2 and err.startswith("error: --runtime-env-json: container is not for a RayJob")
    code, _, err = run([*argv, "--runtime-env-json", "{pip", "--", "python", "train.py"], **no_clients)
    assert code == 2 and err.startswith("error: --runtime-env-json: not valid JSON")
