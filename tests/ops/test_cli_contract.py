"""The CLI's own contract (``hpray --help``: exit codes): every usage error of every subcommand
exits 2 with one clear first line, found before any AWS or Kubernetes client is made; kubeconfig
errors say what is wrong with a fix that fits; a closed pipe is no traceback; uploads skip every
virtualenv; namespaced commands make namespaced calls."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ops.cli import main

ROOT = Path(__file__).resolve().parents[2]
# The unreachable-kubeconfig case connects to a closed port on loopback (refused at once).
LOOPBACK_ALLOWED = True

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {{server: "{server}", insecure-skip-tls-verify: true}}
users:
- name: me
  user: {{token: abc}}
contexts:
- name: lab
  context: {{cluster: lab, user: me}}
{current}
"""


class ClientMade(AssertionError):
    pass


@pytest.fixture
def files(tmp_path, monkeypatch):
    """The paths the rows name: a working dir, a file, missing paths, kubeconfigs good and bad.
    HOME has no ~/.kube/config."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    wd = tmp_path / "project"
    wd.mkdir()
    (wd / "train.py").write_text("print('hi')\n")
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "kc-good").write_text(
        KUBECONFIG.format(server="https://127.0.0.1:6443", current="current-context: lab")
    )
    (tmp_path / "kc-nocurrent").write_text(KUBECONFIG.format(server="https://127.0.0.1:6443", current=""))
    (tmp_path / "kc-bad").write_text("clusters: [oops\n")
    (tmp_path / "kc-list").write_text("- just\n- a list\n")
    (tmp_path / "env-bad.yaml").write_text("pipp: [torch]\n")
    (tmp_path / "env-ints.yaml").write_text("env_vars: {OMP_NUM_THREADS: 8}\n")
    (tmp_path / "env-local.yaml").write_text("py_modules: [./mylib]\n")
    (tmp_path / "env-image.json").write_text('{"image_uri": "x"}')
    (tmp_path / "env-broken.json").write_text('{"pip": [}')
    (tmp_path / "env-wd.yaml").write_text(f"working_dir: {tmp_path}\n")
    return {"tmp": str(tmp_path), "wd": str(wd), "missing": str(tmp_path / "missing")}


@pytest.fixture
def no_clients(monkeypatch):
    """Making any client fails the test: the AWS session, the Kubernetes ApiClient, our wrappers."""
    import boto3
    from kubernetes import client

    from ops.clients import aws, kube

    def refuse(*_a, **_k):
        raise ClientMade("a client was made before the command line was checked")

    monkeypatch.setattr(aws.Aws, "__init__", refuse)
    monkeypatch.setattr(kube.Kube, "__init__", refuse)
    monkeypatch.setattr(client.ApiClient, "__init__", refuse)
    monkeypatch.setattr(boto3.session.Session, "__init__", refuse)


J = ["submit", "job", "--env", "dev"]
CMD = ["--", "python", "train.py"]

# (arguments, first line of stderr); every row exits 2. {wd}, {tmp}, {missing} are paths.
ROWS = [
    # the top and every command's required arguments
    ([], "error: the following arguments are required: COMMAND"),
    (["nope"], "error: argument COMMAND: invalid choice: 'nope' (choose from 'preflight', 'status', 'submit', "),
    (["status"], "error: the following arguments are required: --env"),
    (["status", "--env", "qa"], "error: argument --env: invalid choice: 'qa' (choose from 'dev', 'prod', 'staging')"),
    (["status", "--env", "dev", "extra"], "error: hpray status takes no argument 'extra'"),
    (["status", "--env", "dev", "--gpus", "4"], "error: hpray status does not take --gpus (an option of: submit job)"),
    (["preflight", "--env", "dev", "--kubeconfig", "x"], "error: hpray preflight does not take --kubeconfig"),
    (
        ["preflight", "--env", "dev", "--toolkit-stack-name"],
        "error: argument --toolkit-stack-name: expected one argument",
    ),
    (["--config-dir", "{missing}", "status", "--env", "dev"], "error: --config-dir {missing}: not a directory"),
    (
        ["--config-dir", "{wd}", "status", "--env", "dev"],
        "error: --config-dir {wd}: no environment file (NAME.yaml) in it",
    ),
    # export
    (["export"], "error: the following arguments are required: --env"),
    (["export", "--env", "dev", "--checkpoint", "0"], "error: argument --checkpoint: "),
    # submit
    (["submit", "batch-inference"], "error: the following arguments are required: --env"),
    (["submit"], "error: submit needs the WORKLOAD first: training, inference or job"),
    (["submit", "--env", "dev"], "error: submit needs the WORKLOAD first: training, inference or job"),
    (["submit", "nope", "--env", "dev"], "error: argument WORKLOAD: invalid choice: 'nope' (choose from 'training', "),
    (["submit", "training"], "error: the following arguments are required: --env"),
    (["submit", "pretokenize"], "error: the following arguments are required: --env"),
    (
        ["submit", "training", "--env", "dev", "--gpus", "4"],
        "error: hpray submit training does not take --gpus (an option of: submit job)",
    ),
    (
        ["submit", "training", "--env", "dev", "--working-dir", "."],
        "error: hpray submit training does not take --working-dir (an option of: submit job)",
    ),
    (
        ["submit", "training", "--env", "dev", "--env-var", "A=1"],
        "error: hpray submit training does not take --env-var (an option of: submit job)",
    ),
    (
        ["submit", "training", "--env", "dev", "--runtime-env", "x"],
        "error: hpray submit training does not take --runtime-env (an option of: submit job)",
    ),
    (
        ["submit", "training", "--env", "dev", "--namespace", "x"],
        "error: hpray submit training does not take --namespace",
    ),
    (
        ["submit", "inference", "--env", "dev", "--name", "x"],
        "error: hpray submit inference does not take --name (an option of: submit job)",
    ),
    (
        ["submit", "training", "--env", "dev", *CMD],
        "error: hpray submit training takes no command after --; only `submit job` runs one",
    ),
    (
        ["submit", "training", "--env", "dev", "--attach", "--no-follow"],
        "error: argument --no-follow: not allowed with argument --attach",
    ),
    (
        ["submit", "inference", "--env", "dev", "--poll-seconds", "0"],
        "error: argument --poll-seconds: '0' must be greater than 0",
    ),
    (
        ["submit", "training", "--env", "dev", "--timeout-minutes", "soon"],
        "error: argument --timeout-minutes: 'soon' is not a number",
    ),
    # submit job: the cases, then the rest
    ([*J, "--working-dir", "{missing}", *CMD], "error: --working-dir '{missing}' is not a directory"),
    ([*J, "--working-dir", "{wd}"], "error: submit job needs the command to run after --"),
    ([*J, *CMD], "error: submit job needs --working-dir DIR"),
    ([*J, "--working-dir", "{wd}", "--env-var", "BADVAR", *CMD], "error: --env-var 'BADVAR' is not KEY=VALUE"),
    ([*J, "--working-dir", "{wd}", "--name", "Bad_Name!", *CMD], "error: --name 'Bad_Name!' is not a valid job name"),
    (
        [*J, "--working-dir", "{wd}", "--instance-group", "nope", *CMD],
        "error: --instance-group 'nope' is not a HyperPod instance group of dev",
    ),
    ([*J, "--working-dir", "{wd}", "--gpus", "0", *CMD], "error: argument --gpus: '0' must be at least 1"),
    ([*J, "--working-dir", "{wd}", "--gpus", "-3", *CMD], "error: argument --gpus: '-3' must be at least 1"),
    ([*J, "--working-dir", "{wd}", "--nodes", "0", *CMD], "error: argument --nodes: '0' must be at least 1"),
    ([*J, "--working-dir", "{wd}", "--gpus", "four", *CMD], "error: argument --gpus: 'four' is not a whole number"),
    (
        [*J, "--working-dir", "{wd}", "--gpus", "64", *CMD],
        "error: the job needs 16 ml.g5.12xlarge node(s) (4 GPUs each), but instance group 'gpu-workers' has 2",
    ),
    (
        [*J, "--working-dir", "{wd}", "--gpus", "4", "--nodes", "2", *CMD],
        "error: --gpus 4 needs 1 ml.g5.12xlarge node(s) (4 GPUs each), not --nodes 2",
    ),
    ([*J, "--attach"], "error: --attach needs --name NAME for a job"),
    ([*J, "--attach", "--dry-run", "--name", "x"], "error: argument --dry-run: not allowed with argument --attach"),
    ([*J, "--working-dir", "{wd}", "--runtime-env", "{missing}", *CMD], "error: --runtime-env {missing}: no such file"),
    (
        [*J, "--working-dir", "{wd}", "--runtime-env", "{tmp}/env-bad.yaml", *CMD],
        "error: --runtime-env {tmp}/env-bad.yaml: 'pipp' is not a runtime_env field",
    ),
    (
        [*J, "--working-dir", "{wd}", "--runtime-env", "{tmp}/env-ints.yaml", *CMD],
        "error: --runtime-env {tmp}/env-ints.yaml: env_vars must map names to strings; got {{'OMP_NUM_THREADS': 8}}",
    ),
    (
        [*J, "--working-dir", "{wd}", "--runtime-env", "{tmp}/env-local.yaml", *CMD],
        "error: --runtime-env {tmp}/env-local.yaml: py_modules must list remote URIs",
    ),
    (
        [*J, "--working-dir", "{wd}", "--runtime-env", "{tmp}/env-image.json", *CMD],
        "error: --runtime-env {tmp}/env-image.json: image_uri is not for a RayJob",
    ),
    (
        [*J, "--working-dir", "{wd}", "--runtime-env", "{tmp}/env-broken.json", *CMD],
        "error: --runtime-env {tmp}/env-broken.json: not valid JSON: line 1, column 10: Expecting value",
    ),
    (
        [*J, "--working-dir", "{wd}", "--runtime-env", "{tmp}/env-wd.yaml", *CMD],
        "error: --working-dir {wd} and the runtime env's working_dir {tmp} differ",
    ),
    # kubeconfig: missing, a directory, malformed, not a kubeconfig, unknown context, no context
    (["jobs", "--env", "dev", "--kubeconfig", "{missing}"], "error: --kubeconfig {missing}: the file does not exist"),
    (["status", "--env", "dev", "--kubeconfig", "{tmp}"], "error: --kubeconfig {tmp}: the file is a directory"),
    (
        ["jobs", "--env", "dev", "--kubeconfig", "{tmp}/kc-bad"],
        "error: kubeconfig {tmp}/kc-bad is not valid YAML at line 2, column 1: expected ',' or ']', but got '<stream end>'",
    ),
    (
        ["jobs", "--env", "dev", "--kubeconfig", "{tmp}/kc-list"],
        "error: kubeconfig {tmp}/kc-list is not a kubeconfig (a mapping of clusters, users, contexts)",
    ),
    (
        ["jobs", "--env", "dev", "--kubeconfig", "{tmp}/kc-good", "--context", "prod"],
        "error: --context 'prod' is not in kubeconfig {tmp}/kc-good",
    ),
    (
        ["jobs", "--env", "dev", "--kubeconfig", "{tmp}/kc-nocurrent"],
        "error: kubeconfig {tmp}/kc-nocurrent sets no current-context",
    ),
    (
        ["jobs", "--env", "dev", "--context", "lab"],
        "error: --context lab: there is no kubeconfig to read it from (~/.kube/config: no such file)",
    ),
    # the job commands
    (["jobs", "--env", "dev", "--follow"], "error: hpray jobs does not take --follow (an option of: logs)"),
    (["jobs", "--env", "dev", *CMD], "error: hpray jobs takes no command after --; only `submit job` runs one"),
    (["describe", "--env", "dev"], "error: the following arguments are required: NAME"),
    (
        ["describe", "x", "--env", "dev", "--all-namespaces"],
        "error: hpray describe does not take --all-namespaces (an option of: jobs)",
    ),
    (["pods", "--env", "dev"], "error: the following arguments are required: NAME"),
    (["logs", "--env", "dev"], "error: the following arguments are required: NAME"),
    (["logs", "x", "--env", "dev", "--tail", "0"], "error: argument --tail: '0' must be at least 1"),
    (
        ["logs", "x", "--env", "dev", "--container", "ray-head"],
        "error: --container is for one pod's log: it needs --pod POD",
    ),
    (["logs", "x", "--env", "dev", "--previous"], "error: --previous is for one pod's log: it needs --pod POD"),
    (
        ["logs", "x", "--env", "dev", "--output-dir", "{tmp}", "--follow"],
        "error: --output-dir writes every log of the job; it does not take --follow",
    ),
    (
        ["logs", "x", "--env", "dev", "--output-dir", "{tmp}/a-file"],
        "error: --output-dir {tmp}/a-file: not a directory",
    ),
    (["stop", "--env", "dev"], "error: the following arguments are required: NAME"),
    (["resume", "x", "--env", "dev", "--delete"], "error: hpray resume does not take --delete (an option of: stop)"),
    (["dashboard", "--env", "dev", "--port", "x"], "error: argument --port: invalid int value: 'x'"),
    (["dashboard", "--env", "dev", "--port", "70000"], "error: --port 70000 is not a port"),
    # upgrade, images, completion
    (["upgrade", "--env", "dev"], "error: the following arguments are required: ACTION"),
    (["upgrade", "apply", "--env", "dev"], "error: argument ACTION: invalid choice: 'apply' (choose from 'plan')"),
    (
        ["upgrade", "plan", "--env", "dev", "--gpus", "1"],
        "error: hpray upgrade does not take --gpus (an option of: submit job)",
    ),
    (
        ["upgrade", "plan", "--env", "dev", "--to", "next"],
        "error: argument --to: 'next' is not a Kubernetes minor version such as 1.35",
    ),
    (
        ["upgrade", "plan", "--env", "dev", "--to", "1.20"],
        "error: --to 1.20 is older than dev's Kubernetes 1.34; EKS cannot downgrade",
    ),
    (
        ["upgrade", "plan", "--env", "dev", "--to", "1.40"],
        "error: --to 1.40: EKS upgrades one minor version at a time (1.34 -> 1.35)",
    ),
    (["teardown"], "error: the following arguments are required: --env"),
    (
        ["teardown", "--env", "dev", "--timeout-minutes", "0"],
        "error: argument --timeout-minutes: '0' must be at least 1",
    ),
    (["images"], "error: the following arguments are required: ACTION"),
    (["images", "pin-base", "--env", "dev"], "error: hpray images does not take --env"),
    (["rollout"], "error: the following arguments are required: SERVICE"),
    (
        ["rollout", "inference", "--env", "dev", "--working-dir", "."],
        "error: hpray rollout inference does not take --working-dir",
    ),
    (
        ["rollout", "serve", "--env", "dev"],
        "error: argument SERVICE: invalid choice: 'serve' (choose from 'inference', 'llm')",
    ),
    (
        ["rollout", "inference", "--env", "dev", "--model", "fsx/runs"],
        "error: --model fsx/runs: ",
    ),
    (
        ["rollout", "llm", "--env", "dev", "--model", "/nowhere/export"],
        "error: --model /nowhere/export: not a folder this machine can read, so its export cannot be verified",
    ),
    (["endpoint", "--env", "dev"], "error: the following arguments are required: SERVICE"),
    (
        ["endpoint", "lmm", "--env", "dev"],
        "error: argument SERVICE: invalid choice: 'lmm' (choose from 'inference', 'llm'); did you mean 'llm'?",
    ),
    (["env", "use"], "error: env use needs the environment's NAME"),
    (["env", "use", "qa"], "error: env use: unknown environment 'qa' (known: dev, prod, staging)"),
    (["env", "list", "dev"], "error: env list takes no NAME"),
    (["completion"], "error: the following arguments are required: SHELL"),
    (["completion", "tcsh"], "error: argument SHELL: invalid choice: 'tcsh' (choose from 'bash', 'zsh', 'fish')"),
]


@pytest.mark.parametrize(("argv", "first_line"), ROWS, ids=[" ".join(r[0]) or "(none)" for r in ROWS])
def test_every_usage_error_exits_2_before_any_client(argv, first_line, files, no_clients):
    argv = [a.format(**files) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err, prog="hpray")
    lines = err.getvalue().splitlines()
    assert code == 2, err.getvalue()
    assert lines[0].startswith(first_line.format(**files)), lines[0]
    assert len(lines) == 2 and lines[1].startswith("fix:   "), err.getvalue()
    assert "Traceback" not in err.getvalue() and out.getvalue() == ""


def test_the_table_covers_every_subcommand():
    from ops.cli import build_parser
    from ops.usage import subcommand_parsers

    # Commands with sub-words (submit WORKLOAD, rollout SERVICE) are covered per leaf.
    leaves = {
        " ".join(p)
        for p, sub in subcommand_parsers(build_parser("hpray")).items()
        if p and p not in (("submit",), ("rollout",))
    }
    covered = {
        " ".join(argv[:2]) if argv[:1] in (["submit"], ["rollout"]) and len(argv) > 1 else argv[0]
        for argv, _ in ROWS
        if argv and argv[0] != "--config-dir"
    }
    assert leaves - covered == set()


def test_kubeconfig_fixes_fit_the_case(files, no_clients):
    def fix(argv):
        err = io.StringIO()
        main([a.format(**files) for a in argv], out=io.StringIO(), err=err, prog="hpray")
        return err.getvalue().splitlines()[1]

    missing = fix(["jobs", "--env", "dev", "--kubeconfig", "{missing}"])
    assert missing == (
        f"fix:   write it with `aws eks update-kubeconfig --name hpray-dev-eks --region us-east-1 --kubeconfig "
        f"{files['missing']}`, or leave out --kubeconfig to connect with your AWS identity"
    )
    assert fix(["jobs", "--env", "dev", "--kubeconfig", "{tmp}/kc-bad"]) == (
        "fix:   fix the file, or write it again with `aws eks update-kubeconfig --name hpray-dev-eks --region "
        f"us-east-1 --kubeconfig {files['tmp']}/kc-bad`"
    )
    assert (
        fix(["jobs", "--env", "dev", "--kubeconfig", "{tmp}/kc-good", "--context", "prod"]) == "fix:   use one of: lab"
    )
    for argv in (["jobs", "--env", "dev", "--kubeconfig", "{missing}"], ["jobs", "--env", "dev", "--context", "lab"]):
        assert "Invalid kube-config file" not in fix(argv) and "private EKS" not in fix(argv)


def test_an_unreachable_custom_kubeconfig_names_its_server_not_the_private_endpoint(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connections are refused
    kc = tmp_path / "kc"
    kc.write_text(KUBECONFIG.format(server=f"https://127.0.0.1:{port}", current="current-context: lab"))
    err = io.StringIO()
    code = main(
        ["jobs", "--env", "dev", "--kubeconfig", str(kc)],
        aws_factory=lambda c, p: None,
        out=io.StringIO(),
        err=err,
        prog="hpray",
    )
    lines = err.getvalue().splitlines()
    assert code == 5
    assert (
        lines[0]
        == "error: cannot reach the Kubernetes API for list rayjobs in ray-workloads: 127.0.0.1: [Errno 111] Connection refused"
    )
    assert lines[1] == (
        f"fix:   the server https://127.0.0.1:{port} of context 'lab' (--kubeconfig {kc}) did not answer: check that "
        f"the cluster is up and the address is right (kubectl --kubeconfig {kc} --context lab cluster-info), or leave "
        "out --kubeconfig/--context to connect to the environment's EKS cluster with your AWS identity"
    )


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "AWS_EC2_METADATA_DISABLED": "true"}


# --help: argparse itself drops a failed write of the help text and exits 0.
@pytest.mark.parametrize(
    ("argv", "code"), [(["completion", "bash"], 141), (["completion", "fish"], 141), (["--help"], 0)]
)
def test_a_closed_pipe_is_no_traceback(argv, code):
    """stdout's reader is gone before the first write (deterministic), and a real `| head -1`
    (a race: the reader may go after the first line or before) five times."""
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "ops", *argv], stdout=write, stderr=subprocess.PIPE, env=_env(), cwd=ROOT, timeout=60
        )
    finally:
        os.close(write)
    assert (result.returncode, result.stderr.decode()) == (code, "")
    for _ in range(5):
        shell = subprocess.run(
            f"{sys.executable} -m ops {' '.join(argv)} | head -1",
            shell=True,
            capture_output=True,
            text=True,
            env=_env(),
            cwd=ROOT,
            timeout=60,
        )
        assert shell.stderr == "" and len(shell.stdout.splitlines()) == 1


def test_uploads_skip_every_virtualenv(tmp_path):
    from ops.submit.job import package_working_dir

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print(1)\n")
    for env in (".venv-checkov", "env", "tools/py311"):
        (tmp_path / env / "lib").mkdir(parents=True)
        (tmp_path / env / "pyvenv.cfg").write_text("home = /usr/bin\n")
        (tmp_path / env / "lib" / "big.py").write_text("x = 1\n")
    (tmp_path / "conda" / "conda-meta").mkdir(parents=True)
    (tmp_path / "conda" / "bin.py").write_text("x = 1\n")
    (tmp_path / "tools" / "run.sh").write_text("echo\n")
    import zipfile

    package = package_working_dir(tmp_path, top="job")
    names = sorted(zipfile.ZipFile(io.BytesIO(package.data)).namelist())
    assert names == ["job/src/train.py", "job/tools/run.sh"]


# -- namespaced commands make namespaced calls (a team has only a namespaced Role) ---------------


class Recorder:
    """Stands in for ApiClient.call_api: records each request the generated client would send."""

    def __init__(self):
        self.calls: list[tuple[str, str]] = []

    def __call__(
        self, path, method, path_params=None, query_params=None, header_params=None, body=None, response_type=None, **kw
    ):
        self.calls.append((method, path.format(**(path_params or {}))))
        return {"items": []} if response_type in (None, "object") else None


def recorded_kube():
    from kubernetes import client

    from ops.clients.kube import Kube

    kube = Kube(client.ApiClient(client.Configuration()))
    recorder = Recorder()
    kube._api.call_api = recorder

    def cluster_wide(*_a, **_k):
        raise AssertionError("a cluster-wide list: a team's namespaced Role cannot do it")

    kube.custom.list_cluster_custom_object = cluster_wide
    return kube, recorder


@pytest.mark.parametrize(
    ("argv", "code", "calls"),
    [
        (["jobs", "-n", "team-vision"], 0, ["/apis/ray.io/v1/namespaces/team-vision/rayjobs"]),
        (
            ["dashboard", "-n", "team-vision"],
            4,
            ["/apis/ray.io/v1/namespaces/team-vision/rayjobs", "/apis/ray.io/v1/namespaces/team-vision/rayservices"],
        ),
    ],
)
def test_namespaced_commands_make_namespaced_calls(argv, code, calls):
    kube, recorder = recorded_kube()
    got = main(
        [*argv, "--env", "dev"],
        aws_factory=lambda c, p: None,
        kube_factory=lambda a, c, args: kube,
        token_fn=lambda *a: None,
        out=io.StringIO(),
        err=io.StringIO(),
    )
    assert got == code
    assert recorder.calls == [("GET", c) for c in calls]
