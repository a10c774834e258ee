"""submit: apply rules and the follow loop, against a scripted Kubernetes API.

The fake replaces ops.clients.kube.Kube at its boundary (same methods, realistic objects); time is the
fake's too: each poll's sleep moves the script one tick on, so a 30-minute run takes no time.
"""

from __future__ import annotations

import io
import json

from ops.cli import main
from ops.errors import NotFoundError
from tests.ops.fakes import RAYJOB_NAME, head_pod, rayjob, rayservice

NS = "ray-workloads"


def manifest():
    m = rayjob("new")
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp"):
        m["metadata"].pop(key)
    return m


def service_manifest():
    m = rayservice(True)
    m.pop("status")
    m["metadata"].pop("resourceVersion")
    return m


class ScriptedKube:
    """A Kubernetes API following a script: ticks of (object, {Ray job ID suffix: driver log lines
    so far}); the driver log is what the head's Jobs API answers through a port-forward."""

    def __init__(self, ticks, existing=None, kind="RayJob"):
        self.ticks, self.tick, self.kind = ticks, 0, kind
        self.existing = existing
        self.calls = []
        self.created = None

    # the clock and sleep the Follower is given
    def clock(self):
        return 60.0 * self.tick

    def sleep(self, seconds):
        self.tick = min(self.tick + 1, len(self.ticks) - 1)

    def read_config_map(self, namespace, name):
        # The cluster stack's ConfigMap: the image `cdk deploy` pushed for this checkout.
        from manifests import image

        assert (namespace, name) == ("ray-workloads", image.DEPLOYED_CONFIGMAP)
        return {"uri": image.image_uri("111111111111", "us-east-1")}

    def get_ray(self, kind, namespace, name):
        self.calls.append(("get", kind, namespace, name))
        if self.created is None:
            if self.existing is None:
                raise NotFoundError(f"get {kind} {namespace}/{name}: not found")
            return self.existing
        return self.ticks[self.tick][0]

    def create_ray(self, kind, namespace, body):
        self.calls.append(("create", kind, namespace, body["metadata"]["name"]))
        self.created = body
        return body

    def delete_ray(self, kind, namespace, name):
        self.calls.append(("delete", kind, namespace, name))
        self.existing = None

    def replace_ray(self, kind, namespace, name, body):
        self.calls.append(("replace", kind, namespace, name, body["metadata"].get("resourceVersion")))
        self.created = body
        return body

    def list_pods(self, namespace, label_selector):
        self.calls.append(("pods", namespace, label_selector))
        selector = dict(term.split("=", 1) for term in label_selector.split(","))
        return [head_pod(selector["ray.io/cluster"], namespace=namespace)]

    def pod_http_get(self, namespace, pod, port, path, headers=None):
        # The whole log so far each time, as Ray's GET /api/jobs/{id}/logs answers.
        self.calls.append(("http", namespace, pod, port, path))
        job_id = path.split("/")[3]
        lines = self.ticks[self.tick][1].get(job_id.rsplit("-", 1)[1])
        if lines is None:
            return 404, f"Job {job_id} does not exist".encode()
        return 200, json.dumps({"logs": "".join(line + "\n" for line in lines)}).encode()


W = "(RayTrainWorker pid=4182, ip=10.11.3.17) "
LOG_1 = [
    W + "TRAIN start step=0 (no checkpoint) t=1.0",
    W + "TRAIN step=50 loss=3.9000 t=2.0",
    W + "TRAIN step=100 loss=3.1000 t=3.0",
]
LOG_1_END = [*LOG_1, W + "TRAIN injected failure after step 130"]
LOG_2 = [
    "Ray job submitted",
    W + "TRAIN resume step=100 from=/fsx/checkpoints/hpray-dev-train/checkpoint_000100 t=9.0",
    W + "TRAIN step=150 loss=2.9000 t=10.0",
]
LOG_2_END = [*LOG_2, W + "TRAIN step=200 loss=2.7000 t=11.0", W + "TRAIN done step=200 t=12.0"]

RUN_WITH_A_FAILURE = [
    (rayjob("initializing"), {}),
    (rayjob("running"), {"9vq4s": LOG_1[:1]}),
    (rayjob("running"), {"9vq4s": LOG_1}),
    (rayjob("retrying"), {"9vq4s": LOG_1_END}),
    (rayjob("running-again"), {"9vq4s": LOG_1_END, "b2m8d": LOG_2}),
    (rayjob("complete"), {"9vq4s": LOG_1_END, "b2m8d": LOG_2_END}),
]


def short_run_config(name="dev"):
    """dev with a 200-step run (checkpoint every 100), the length of the scripted runs below, on
    an FSx fast enough for a checkpoint every 100 steps (sizing/storage.py's burst check)."""
    from config import parse_environment
    from tests.ops.fakes import env_data

    data = env_data(name)
    data["fsx"] = {**(data.get("fsx") or {}), "throughput_mb_s_per_tib": 250}
    data["training"] = {
        **(data.get("training") or {}),
        "steps": 200,
        "checkpoint_every_steps": 100,
        "report_every_steps": 50,
    }
    return parse_environment(data)


def as_text(raw):
    """A non-terminal gets JSON lines; their messages read as the plain lines, the progress
    display indented."""
    return "".join(
        ("  " if e["event"] == "progress" else "") + e["message"] + "\n" for e in map(json.loads, raw.splitlines())
    )


def submit(kube, argv, out, *, render=True, load_config=short_run_config, sleep=None, **kwargs):
    """``main`` against the scripted API, on its clock, without AWS; ``render``: the scripted
    manifests (else the real renderer), ``load_config`` None: the real config/ file."""
    extra = (
        {"render_fn": lambda kind, config: manifest() if kind == "training" else service_manifest()} if render else {}
    )
    if load_config is not None:
        extra["load_config"] = load_config
    return main(
        argv,
        kube_factory=lambda aws, config, a: kube,
        sleep=sleep or kube.sleep,
        clock=kube.clock,
        out=out,
        aws_factory=lambda c, p: None,
        **extra,
        **kwargs,
    )


def run(kube, *args):
    out = io.StringIO()
    code = submit(kube, ["submit", *args, "--env", "dev"], out)
    return code, out.getvalue() if "--json" in args else as_text(out.getvalue())


def test_submit_follows_a_run_through_a_failure_and_resume_to_success():
    kube = ScriptedKube(RUN_WITH_A_FAILURE)
    code, out = run(kube, "training")
    assert code == 0
    assert ("create", "RayJob", NS, RAYJOB_NAME) in kube.calls
    # The driver log comes from each attempt's head through a port-forward to its dashboard.
    assert ("http", NS, f"{RAYJOB_NAME}-x7k2p-head-8xk2q", 8265, f"/api/jobs/{RAYJOB_NAME}-9vq4s/logs") in kube.calls
    assert ("http", NS, f"{RAYJOB_NAME}-q3w9z-head-8xk2q", 8265, f"/api/jobs/{RAYJOB_NAME}-b2m8d/logs") in kube.calls
    lines = out.splitlines()
    assert lines[0] == f"created RayJob {NS}/{RAYJOB_NAME}"
    assert lines[1] == f"{RAYJOB_NAME}: New/- -> Initializing/-"
    assert f"{RAYJOB_NAME}: failure in the job log: {W}TRAIN injected failure after step 130" in lines
    assert f"{RAYJOB_NAME}: resumed from checkpoint at step 100" in lines
    # steps 0..100 arrive in the log between two polls 60 s apart: 100 steps / 60 s; the run has
    # training.steps = 200, so 100 more take another minute
    assert "  [RUNNING]  step 100/200 (50.0%)  loss 3.1000  1.67 steps/s  ETA 1m00s" in lines
    # after the resume the rate is measured again from step 100: 100 steps in the next 60 s
    assert (
        lines[-2]
        == "  [SUCCEEDED]  step 200/200 (100.0%)  loss 2.7000  1.67 steps/s  resumed 1x (last from step 100)  failed attempts 1"
    )
    assert lines[-1] == f"RayJob {NS}/{RAYJOB_NAME} succeeded at step 200"
    # every log line is seen once, though each read returned the whole log
    assert out.count("resumed from checkpoint") == 1 and out.count("injected failure") == 1


class CtrlC:
    def __init__(self, kube, after):
        self.kube, self.after = kube, after

    def __call__(self, seconds):
        if self.kube.tick >= self.after:
            raise KeyboardInterrupt
        self.kube.sleep(seconds)


def test_ctrl_c_leaves_the_job_running_and_says_how_to_reattach():
    kube = ScriptedKube(RUN_WITH_A_FAILURE)
    out = io.StringIO()
    code = submit(kube, ["submit", "training", "--env", "dev"], out, sleep=CtrlC(kube, after=2))
    assert code == 130
    assert not [c for c in kube.calls if c[0] in ("delete", "replace")]
    assert as_text(out.getvalue()).endswith(
        f"\nStopped following. The RayJob {NS}/{RAYJOB_NAME} keeps running on the cluster.\n"
        "  reattach:  python -m ops submit training --env dev --attach\n"
        f"  or watch:  kubectl -n {NS} get rayjob {RAYJOB_NAME} -w\n"
    )
    assert json.loads(out.getvalue().splitlines()[-1])["event"] == "detached"


def test_attach_follows_without_applying():
    kube = ScriptedKube(RUN_WITH_A_FAILURE[3:])
    kube.created = manifest()  # submitted earlier
    code, out = run(kube, "training", "--attach")
    assert code == 0
    assert not [c for c in kube.calls if c[0] in ("create", "delete", "replace")]
    # attaching mid-run: the first read takes the log tail and catches up on the resume
    assert f"{RAYJOB_NAME}: resumed from checkpoint at step 100" in out


def test_a_running_job_is_followed_not_resubmitted():
    kube = ScriptedKube(RUN_WITH_A_FAILURE[2:], existing=rayjob("running"))
    code, out = run(kube, "training", "--no-follow")
    assert code == 0
    assert (
        out.splitlines()[0]
        == f"RayJob {NS}/{RAYJOB_NAME} is already running (Running); following it instead of submitting again"
    )
    assert not [c for c in kube.calls if c[0] in ("create", "delete")]


def test_a_finished_job_is_deleted_and_submitted_again():
    kube = ScriptedKube(RUN_WITH_A_FAILURE, existing=rayjob("complete"))
    code, out = run(kube, "training", "--no-follow")
    assert code == 0
    assert [c[0] for c in kube.calls if c[0] != "get"] == ["delete", "create"]
    assert "finished earlier (Complete); deleting it to submit again (the run resumes from its checkpoints)" in out


def test_a_failed_job_exits_non_zero_with_its_message():
    kube = ScriptedKube([(rayjob("running"), {"9vq4s": LOG_1}), (rayjob("failed"), {"9vq4s": LOG_1_END})])
    code, out = run(kube, "training")
    assert code == 1
    assert out.splitlines()[-1] == (
        f"RayJob {NS}/{RAYJOB_NAME} ended Failed/FAILED: Job entrypoint command failed with exit code 1. "
        f"Driver log: python -m ops logs {RAYJOB_NAME} --env dev"
    )


def test_timeout_stops_following_only():
    kube = ScriptedKube([(rayjob("running"), {"9vq4s": LOG_1})] * 5)
    code, out = run(kube, "training", "--timeout-minutes", "2")
    assert code == 1
    assert (
        out.splitlines()[-1]
        == "gave up following after 120 s; the RayJob keeps going. Reattach: python -m ops submit training --env dev --attach"
    )


def test_json_mode_emits_one_event_per_line():
    kube = ScriptedKube(RUN_WITH_A_FAILURE)
    code, out = run(kube, "training", "--json")
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert events[0] == {"event": "message", "message": f"created RayJob {NS}/{RAYJOB_NAME}"}
    progress = [e for e in events if e["event"] == "progress"]
    assert (
        progress[-1]["step"] == 200 and progress[-1]["resumed_from"] == [100] and progress[-1]["failed_attempts"] == 1
    )
    assert events[-1]["event"] == "done" and events[-1]["succeeded"] is True


def test_inference_creates_then_waits_until_ready():
    kube = ScriptedKube([(rayservice(False), {}), (rayservice(True), {})], kind="RayService")
    code, out = run(kube, "inference")
    assert code == 0
    assert out.splitlines()[0] == f"created RayService {NS}/hpray-dev-serve"
    assert out.splitlines()[-1] == f"RayService {NS}/hpray-dev-serve is ready"


def test_inference_updates_an_existing_service_in_place():
    kube = ScriptedKube([(rayservice(True), {})], existing=rayservice(True), kind="RayService")
    code, _out = run(kube, "inference", "--no-follow")
    assert code == 0
    assert ("replace", "RayService", NS, "hpray-dev-serve", "2002") in kube.calls


def test_attach_to_a_job_that_does_not_exist():
    kube = ScriptedKube([(rayjob("running"), {})])
    out, err = io.StringIO(), io.StringIO()
    code = submit(kube, ["submit", "training", "--env", "dev", "--attach"], out, load_config=None, err=err)
    assert code == 1
    assert err.getvalue() == (
        f"error: RayJob {NS}/{RAYJOB_NAME} does not exist (deleted, or never submitted)\n"
        "fix:   submit it: python -m ops submit training --env dev\n"
    )


def test_the_configured_step_budget_makes_a_fraction_and_an_eta():
    from ops.submit.follow import Follower, FollowOptions, Target

    kube = ScriptedKube(RUN_WITH_A_FAILURE)
    kube.created = manifest()
    out = io.StringIO()
    code = Follower(
        kube,
        Target(workload="training", env="dev", kind="RayJob", namespace=NS, name=RAYJOB_NAME),
        FollowOptions(total_steps=400, out=out, sleep=kube.sleep, clock=kube.clock),
    ).run()
    assert code == 0
    assert "  [RUNNING]  step 100/400 (25.0%)  loss 3.1000  1.67 steps/s  ETA 3m00s" in out.getvalue().splitlines()


def test_submit_applies_the_workload_renderers_manifest():
    """No render_fn: the real renderer (manifests.__main__.RENDERERS) renders config/dev.yaml."""
    from config import load_environment
    from manifests.training import render as render_rayjob

    expected = render_rayjob(load_environment("dev"))
    name, ns = expected["metadata"]["name"], expected["metadata"]["namespace"]
    kube = ScriptedKube([(rayjob("complete", name=name, namespace=ns), {})])
    out = io.StringIO()
    code = submit(kube, ["submit", "training", "--env", "dev"], out, render=False, load_config=None)
    assert code == 0
    assert kube.created == expected
    assert as_text(out.getvalue()).splitlines()[0] == f"created RayJob {ns}/{name}"


def test_rendering_imports_neither_ray_nor_torch():
    import subprocess
    import sys

    code = (
        "import sys; from config import load_environment; from ops.submit.render import render; "
        "render('training', load_environment('prod')); render('inference', load_environment('prod')); sys.exit(bool({'ray', 'torch', 'aws_cdk'} & set(sys.modules)))"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_submit_inference_applies_the_rendered_rayservice():
    from config import load_environment
    from manifests.inference import render as render_rayservice

    expected = render_rayservice(load_environment("dev"))
    name, ns = expected["metadata"]["name"], expected["metadata"]["namespace"]
    kube = ScriptedKube([(rayservice(True, name=name, namespace=ns), {})], kind="RayService")
    out = io.StringIO()
    code = submit(kube, ["submit", "inference", "--env", "dev"], out, render=False, load_config=None)
    assert code == 0
    assert kube.created == expected
    assert as_text(out.getvalue()).splitlines()[-1] == f"RayService {ns}/{name} is ready"


def test_ctrl_c_while_applying_says_how_to_check_and_reattach():
    kube = ScriptedKube(RUN_WITH_A_FAILURE)

    def interrupted(kind, namespace, body):
        raise KeyboardInterrupt

    kube.create_ray = interrupted
    code, out = run(kube, "training")
    assert code == 130
    assert out.endswith(
        f"interrupted while applying RayJob {NS}/{RAYJOB_NAME}; it may or may not exist now.\n"
        f"  check:     kubectl -n {NS} get rayjob {RAYJOB_NAME}\n"
        "  reattach:  python -m ops submit training --env dev --attach\n"
    )


def screen(raw: str) -> list[str]:
    """What a terminal shows: each row is what follows its last carriage-return-and-erase."""
    rows = raw.replace("\r\n", "\n").split("\n")
    return [row.rsplit("\r\x1b[K", 1)[-1] for row in rows]


def test_a_terminal_gets_the_live_display_and_a_pipe_gets_json_lines():
    import fcntl
    import os
    import pty
    import struct
    import termios
    import threading

    master, slave = pty.openpty()
    # A 160-column terminal: the status line is cut to the width, so that it never wraps.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    chunks = []

    def drain():
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the slave side closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    kube = ScriptedKube(RUN_WITH_A_FAILURE)
    with os.fdopen(slave, "w") as tty:
        assert tty.isatty()
        code = submit(kube, ["submit", "training", "--env", "dev"], tty)
    reader.join(timeout=10)
    os.close(master)
    raw = b"".join(chunks).decode()
    assert code == 0
    assert "{" not in raw  # no JSON on a terminal
    assert max(len(row) for row in screen(raw)) <= 159
    # The status line is redrawn in place: many draws, one row left on the screen per event.
    assert raw.count("\r\x1b[K") > len(screen(raw))
    rows = screen(raw)
    assert rows[0] == f"created RayJob {NS}/{RAYJOB_NAME}"
    assert f"{RAYJOB_NAME}: resumed from checkpoint at step 100" in rows
    assert f"{RAYJOB_NAME}: failure in the job log: {W}TRAIN injected failure after step 130" in rows
    # The last status line stays, with its bar, above the final message.
    assert rows[-3].startswith("[####################] [SUCCEEDED]  step 200/200 (100.0%)  loss 2.7000")
    assert "resumed 1x (last from step 100)" in rows[-3]
    assert rows[-2:] == [f"RayJob {NS}/{RAYJOB_NAME} succeeded at step 200", ""]
    # Mid-run the status row showed the fraction, the rate and the ETA.
    assert "\r\x1b[K[##########----------] [RUNNING]  step 100/200 (50.0%)  loss 3.1000  1.67 steps/s  ETA 1m00s" in raw

    # Not a terminal (a pipe, a file, CI): JSON lines without --json.
    kube = ScriptedKube(RUN_WITH_A_FAILURE)
    out = io.StringIO()
    submit(kube, ["submit", "training", "--env", "dev"], out)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert {e["event"] for e in events} >= {"message", "status", "progress", "log", "done"}
    assert events[-1] == {
        "event": "done",
        "message": f"RayJob {NS}/{RAYJOB_NAME} succeeded at step 200",
        "succeeded": True,
    }


class TokenAuthKube(ScriptedKube):
    """Heads that run Ray's token authentication (KubeRay's env names the synced Secret, which
    this API refuses to read) and record the header each log read sends."""

    def __init__(self, ticks):
        super().__init__(ticks)
        self.auth_headers = []

    def list_pods(self, namespace, label_selector):
        selector = dict(term.split("=", 1) for term in label_selector.split(","))
        return [head_pod(selector["ray.io/cluster"], namespace=namespace, token_secret="ray-auth-token")]

    def pod_http_get(self, namespace, pod, port, path, headers=None):
        self.auth_headers.append((headers or {}).get("x-ray-authorization"))
        return super().pod_http_get(namespace, pod, port, path, headers)

    def read_secret_value(self, namespace, name, key):
        raise AssertionError("the Kubernetes Secret is read where Secrets Manager has the token")


def test_following_a_run_sends_the_platforms_token_from_secrets_manager(shared_moto):
    import boto3

    from config.facts import permissions
    from config.facts.names import ray_auth_secret_name
    from tests.ops.fakes import REGION
    from tests.ops.test_ops_permissions import recording_aws

    config = short_run_config()
    assert config.eks.ray_token_auth
    secret = ray_auth_secret_name(config.name_prefix)
    boto3.client("secretsmanager", region_name=REGION).create_secret(Name=secret, SecretString="t0ken")
    aws, calls = recording_aws()
    kube = TokenAuthKube(RUN_WITH_A_FAILURE)
    out = io.StringIO()
    try:
        code = main(
            ["submit", "training", "--env", "dev"],
            kube_factory=lambda aws, config, a: kube,
            sleep=kube.sleep,
            clock=kube.clock,
            out=out,
            aws_factory=lambda c, p: aws,
            render_fn=lambda kind, config: manifest(),
            load_config=lambda name: config,
        )
    finally:
        boto3.client("secretsmanager", region_name=REGION).delete_secret(
            SecretId=secret, ForceDeleteWithoutRecovery=True
        )
    assert code == 0, out.getvalue()
    assert kube.auth_headers and set(kube.auth_headers) == {"Bearer t0ken"}
    assert set(calls) == {"secretsmanager:GetSecretValue"} and set(calls) <= set(permissions.SUBMIT)


def test_the_installed_hpray_hints_name_hpray():
    """`hpray submit` prints its log, resubmit and reattach hints as `hpray ...`, never `python -m ops`."""
    kube = ScriptedKube([(rayjob("running"), {"9vq4s": LOG_1}), (rayjob("failed"), {"9vq4s": LOG_1_END})])
    out = io.StringIO()
    assert submit(kube, ["submit", "training", "--env", "dev"], out, prog="hpray") == 1
    assert as_text(out.getvalue()).splitlines()[-1].endswith(f"Driver log: hpray logs {RAYJOB_NAME} --env dev")
    kube = ScriptedKube([(rayjob("running"), {"9vq4s": LOG_1})] * 5)
    out = io.StringIO()
    submit(kube, ["submit", "training", "--env", "dev", "--timeout-minutes", "2"], out, prog="hpray")
    text = as_text(out.getvalue())
    assert "Reattach: hpray submit training --env dev --attach" in text
    assert "python -m ops" not in text


def test_rollout_inference_serves_the_chosen_run_and_follows_the_rollout():
    """`rollout inference --run NAME --model PATH` (issue 37): the RayService rendered with that
    run and storage path, applied and followed until ready, as `submit inference`."""
    from config import load_environment
    from manifests.inference import render as render_rayservice

    config = load_environment("dev")
    data = config.model_dump()
    data["inference"]["run_name"], data["inference"]["storage_path"] = "my-run", "s3://my-team-runs/runs/"
    expected = render_rayservice(type(config).model_validate(data))
    name, ns = expected["metadata"]["name"], expected["metadata"]["namespace"]
    kube = ScriptedKube([(rayservice(True, name=name, namespace=ns), {})], kind="RayService")
    out = io.StringIO()
    argv = ["rollout", "inference", "--env", "dev", "--run", "my-run", "--model", "s3://my-team-runs/runs/"]
    code = submit(kube, argv, out, render=False, load_config=None, prog="hpray")
    assert code == 0, out.getvalue()
    assert kube.created == expected
    assert as_text(out.getvalue()).splitlines()[-1] == f"RayService {ns}/{name} is ready"


def test_rollout_llm_verifies_the_export_before_anything(tmp_path):
    """The LLM service's model is an export checked against its manifest.json (verify_export):
    a good one is named in the dry run, a damaged one is refused (exit 2) before any client."""
    import hashlib
    import json as json_mod

    from workloads.common.hf_llama import EXPORT_FORMAT

    export = tmp_path / "llama-export"
    export.mkdir()
    weights = b"\x00" * 64
    (export / "model.safetensors").write_bytes(weights)
    files = {"model.safetensors": {"size": len(weights), "sha256": hashlib.sha256(weights).hexdigest()}}
    (export / "manifest.json").write_text(json_mod.dumps({"format": EXPORT_FORMAT, "files": files}))

    def refuse(*_a, **_k):
        raise AssertionError("made a client")

    out, err = io.StringIO(), io.StringIO()
    argv = ["rollout", "llm", "--env", "prod", "--model", str(export), "--dry-run"]
    assert main(argv, out=out, err=err, prog="hpray", aws_factory=refuse, kube_factory=refuse) == 0, err.getvalue()
    assert f"# verified 1 files of {export} against its manifest.json" in out.getvalue().splitlines()
    assert str(export) in out.getvalue()  # the model source of the rendered serve config
    (export / "model.safetensors").write_bytes(b"\x01" * 64)
    out, err = io.StringIO(), io.StringIO()
    assert main(argv, out=out, err=err, prog="hpray", aws_factory=refuse, kube_factory=refuse) == 2
    assert err.getvalue().startswith(f"error: --model {export}: {export / 'model.safetensors'}: sha256 ")


def test_submit_training_refuses_a_dataset_whose_manifest_is_not_there(shared_moto):
    """training.dataset_path's manifest.json is read in the checkpoint bucket's copy (the data
    repository association exports the pretokenize job's output) before anything is applied:
    missing, the command exits 1 naming the path, its copy and the command that writes it; there,
    the run is submitted. The calls are the permission table's."""
    import boto3

    from config import parse_environment
    from config.facts import permissions
    from config.pretokenize import TOKEN_SHARDS_FORMAT
    from tests.ops.fakes import REGION, env_data
    from tests.ops.test_ops_permissions import recording_aws

    data = env_data("dev")
    data["training"] = {
        **(data.get("training") or {}),
        "steps": 200,
        "checkpoint_every_steps": 100,
        "data_path": None,
        "dataset_path": "/fsx/checkpoints/datasets/web",
    }
    data["fsx"] = {**(data.get("fsx") or {}), "throughput_mb_s_per_tib": 250}
    config = parse_environment(data)
    copy = config.s3_copy_of("/fsx/checkpoints/datasets/web/manifest.json")
    bucket, _, key = copy.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=bucket)

    def submit_with(aws):
        kube = ScriptedKube(RUN_WITH_A_FAILURE)
        out, err = io.StringIO(), io.StringIO()
        code = main(
            ["submit", "training", "--env", "dev"],
            kube_factory=lambda a, c, args: kube,
            sleep=kube.sleep,
            clock=kube.clock,
            out=out,
            err=err,
            aws_factory=lambda c, p: aws,
            render_fn=lambda kind, c: manifest(),
            load_config=lambda name: config,
        )
        return code, err.getvalue(), kube

    try:
        aws, calls = recording_aws()
        code, err, kube = submit_with(aws)
        assert code == 1
        assert err.startswith(
            f"error: training.dataset_path: /fsx/checkpoints/datasets/web has no manifest.json ({copy} is "
            "missing): the dataset is not written yet, or is incomplete (the pretokenize job writes its manifest last)"
        ), err
        assert "submit pretokenize --env dev" in err
        assert kube.created is None and not kube.calls
        s3.put_object(Bucket=bucket, Key=key, Body=json.dumps({"format": TOKEN_SHARDS_FORMAT}).encode())
        code, err, kube = submit_with(aws)
        assert code == 0, err
        assert set(calls) <= set(permissions.SUBMIT) and "s3:GetObject" in calls
    finally:
        for obj in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=obj["Key"])
        s3.delete_bucket(Bucket=bucket)
