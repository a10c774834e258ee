"""``submit job``: packaging, the upload to S3 (moto), the RayJob (against the KubeRay CRD), placement
errors, and the scheduler's reason when pods cannot be placed."""

from __future__ import annotations

import io
import json
import re
import zipfile

import boto3
import pytest

from config import parse_environment
from config.facts.jobs import JOBS_PREFIX
from manifests import crd
from ops.cli import main
from ops.clients.aws import Aws
from ops.errors import OpsError, UnschedulableError
from ops.submit import job as js
from ops.submit import job_follow
from ops.submit.follow import FollowOptions, Target
from tests.ops.fakes import REGION, env_data, rayjob, submitter_pod


@pytest.fixture
def dev():
    return parse_environment(env_data("dev"), source="test")


@pytest.fixture
def code(tmp_path):
    d = tmp_path / "my-project"
    (d / "pkg").mkdir(parents=True)
    (d / "train.py").write_text("print('hello')\n")
    (d / "pkg" / "util.py").write_text("X = 1\n")
    for junk in (".git/HEAD", "__pycache__/train.cpython-311.pyc", ".venv/bin/python", "data/big.bin"):
        (d / junk).parent.mkdir(parents=True, exist_ok=True)
        (d / junk).write_bytes(b"x" * 10)
    return d


def test_package_has_one_top_level_dir_without_junk_and_is_deterministic(code):
    first = js.package_working_dir(code, excludes=("data",), top="job-1")
    names = zipfile.ZipFile(io.BytesIO(first.data)).namelist()
    assert names == ["job-1/pkg/util.py", "job-1/train.py"]
    assert first.files == 2
    again = js.package_working_dir(code, excludes=("data",), top="job-1")
    assert again.data == first.data and again.sha256 == first.sha256
    (code / "train.py").write_text("print('changed')\n")
    assert js.package_working_dir(code, excludes=("data",), top="job-1").sha256 != first.sha256
    assert first.key("job-1") == f"{JOBS_PREFIX}job-1/working-dir-{first.sha256[:16]}.zip"


def test_package_errors(tmp_path, monkeypatch):
    with pytest.raises(OpsError, match="is not a directory"):
        js.package_working_dir(tmp_path / "nope")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("x")
    with pytest.raises(OpsError, match="has no files to upload"):
        js.package_working_dir(tmp_path)
    monkeypatch.setattr(js, "MAX_ZIP_BYTES", 100)
    (tmp_path / "weights.bin").write_bytes(b"0" * 200)
    with pytest.raises(OpsError) as err:
        js.package_working_dir(tmp_path)
    assert err.value.message.endswith("holds more than 0 MiB of files (at weights.bin)")
    assert "--exclude PATTERN" in err.value.fix


def test_job_names(code):
    assert js.job_name(code, "llama-sft") == "llama-sft"
    generated = js.job_name(code, None)
    assert generated.startswith("my-project-") and len(generated) == len("my-project-") + 6
    assert js.job_name(code, None) != generated
    for bad in ("Llama", "1abc", "a_b", "x" * 41, "ends-"):
        with pytest.raises(OpsError, match=f"--name {bad!r} is not a valid job name"):
            js.job_name(code, bad)


def test_placement_rounds_gpus_up_to_whole_nodes(dev):
    # dev: gpu-workers, 2 x ml.g5.12xlarge (4 A10G each).
    assert js.placement(dev, instance_group=None, gpus=4, nodes=None).nodes == 1
    p = js.placement(dev, instance_group=None, gpus=5, nodes=None)
    assert (p.group, p.instance_type, p.nodes, p.gpus_per_node) == ("gpu-workers", "ml.g5.12xlarge", 2, 4)
    assert js.placement(dev, instance_group=None, gpus=None, nodes=None).nodes == 1
    with pytest.raises(OpsError) as err:
        js.placement(dev, instance_group=None, gpus=12, nodes=None)
    assert (
        err.value.message
        == "the job needs 3 ml.g5.12xlarge node(s) (4 GPUs each), but instance group 'gpu-workers' has 2"
    )
    assert err.value.fix == "ask at most 8 GPUs / 2 nodes"
    with pytest.raises(OpsError, match="--instance-group 'cpu' is not a HyperPod instance group of dev"):
        js.placement(dev, instance_group="cpu", gpus=None, nodes=None)
    with pytest.raises(OpsError, match=re.escape("--gpus 8 needs 2 ml.g5.12xlarge node")):
        js.placement(dev, instance_group=None, gpus=8, nodes=1)


def test_rendered_job_is_valid_for_kuberay_and_reads_the_uploaded_zip(dev):
    p = js.placement(dev, instance_group=None, gpus=8, nodes=None)
    uri = f"s3://{dev.bucket_names()['checkpoints']}/{JOBS_PREFIX}llama-sft/working-dir-0123456789abcdef.zip"
    manifest = js.render_job(
        dev,
        name="llama-sft",
        command=["python", "train.py", "--lr", "3e-4", "--note", "a b"],
        working_dir_uri=uri,
        p=p,
        env={"WANDB_MODE": "offline"},
    )
    assert crd.validate(manifest) == []
    spec = manifest["spec"]
    assert spec["entrypoint"] == "python train.py --lr 3e-4 --note 'a b'"
    runtime_env = json.loads(spec["runtimeEnvYAML"])
    assert runtime_env["working_dir"] == uri
    assert runtime_env["env_vars"]["HPRAY_CHECKPOINT_DIR"] == "/fsx/checkpoints/jobs/llama-sft"
    assert runtime_env["env_vars"]["WANDB_MODE"] == "offline"
    assert spec["shutdownAfterJobFinishes"] is True  # KubeRay suspends (stop) only such jobs
    workers = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert [(w["groupName"], w["replicas"]) for w in workers] == [("gpu-workers", 2)]
    assert workers[0]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    # Every Ray pod downloads the zip with the workloads role (Pod Identity) and needs the region.
    for pod in [spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"], workers[0]["template"]["spec"]]:
        assert pod["serviceAccountName"] == "ray-workloads"
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["AWS_REGION"] == REGION
    assert manifest["metadata"]["labels"]["hpray.io/job"] == "llama-sft"


def test_rendered_job_runs_in_http_mode_and_the_network_policies_select_its_pods(dev):
    from config.facts.jobs import JOBS_WORKLOAD
    from manifests import network_policy, security

    p = js.placement(dev, instance_group=None, gpus=8, nodes=None)
    manifest = js.render_job(dev, name="llama-sft", command=["python", "t.py"], working_dir_uri="s3://b/k.zip", p=p)
    spec = manifest["spec"]
    # HTTPMode: no submitter pod whose end fails the RayJob; pods that cannot start fail it early.
    assert spec["submissionMode"] == "HTTPMode"
    assert "submitterPodTemplate" not in spec and "submitterConfig" not in spec
    assert spec["preRunningDeadlineSeconds"] == 1800
    # suspend (stop) needs shutdownAfterJobFinishes, which KubeRay 1.7 does not allow with deletionRules.
    assert "deletionStrategy" not in spec
    pods = security.pods_for_review(manifest)
    assert [pod["metadata"]["name"] for pod in pods] == ["llama-sft-head", "llama-sft-gpu-workers"]
    policies = {pol["metadata"]["name"]: pol["spec"] for pol in network_policy.render(dev)["items"]}

    def selects(selector: dict, labels: dict[str, str]) -> bool:
        exprs = selector.get("matchExpressions", [])
        assert all(e["operator"] == "Exists" for e in exprs)
        return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()) and all(
            e["key"] in labels for e in exprs
        )

    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert labels[security.WORKLOAD_LABEL] == JOBS_WORKLOAD
        # KubeRay adds ray.io/node-type to the pods it creates from the templates.
        head = pod["metadata"]["name"].endswith("-head")
        as_created = {**labels, "ray.io/node-type": "head" if head else "worker"}
        selecting = sorted(n for n, pol in policies.items() if selects(pol["podSelector"], as_created))
        expected = ["default-deny-ingress", "ray-metrics-from-collector", f"{JOBS_WORKLOAD}-ray-internal"]
        if head:
            expected.insert(2, f"{JOBS_WORKLOAD}-from-operator")
        assert selecting == expected
        # The internal rule admits exactly the pods of this workload: head and workers reach each other.
        internal = policies[f"{JOBS_WORKLOAD}-ray-internal"]["ingress"][0]["from"][0]["podSelector"]
        assert selects(internal, labels)
        # Pod security as the platform's own RayJob.
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_upload_to_s3_once_per_content(dev, moto, code):
    aws = Aws(REGION)
    bucket = dev.bucket_names()["checkpoints"]
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=bucket)
    package = js.package_working_dir(code, top="j")
    key = package.key("j")
    assert js.upload(aws, bucket, key, package) is True
    assert js.upload(aws, bucket, key, package) is False
    body = boto3.client("s3", region_name=REGION).get_object(Bucket=bucket, Key=key)["Body"].read()
    assert body == package.data


def test_cli_submit_job_uploads_and_creates_the_rayjob(dev, moto, code):
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=dev.bucket_names()["checkpoints"])
    created = {}

    class Kube:
        def get_ray(self, kind, namespace, name):
            from ops.errors import NotFoundError

            raise NotFoundError("not found")

        def create_ray(self, kind, namespace, body):
            created[(namespace, body["metadata"]["name"])] = body

        def read_config_map(self, namespace, name):
            # What the cluster stack wrote: the image `cdk deploy` pushed (not recomputed here).
            assert (namespace, name) == ("ray-workloads", "hpray-workloads-image")
            return {"uri": DEPLOYED}

    out = io.StringIO()
    code_ = main(
        [
            "submit",
            "job",
            "--env",
            "dev",
            "--working-dir",
            str(code),
            "--name",
            "hello",
            "--gpus",
            "4",
            "--no-follow",
            "--json",
            "--",
            "python",
            "train.py",
        ],
        aws_factory=lambda c, p: Aws(REGION),
        kube_factory=lambda a, c, args: Kube(),
        load_config=lambda name: dev,
        out=out,
        prog="hpray",
    )
    assert code_ == 0, out.getvalue()
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    uri = next(e["uri"] for e in events if e.get("event") == "uploaded")
    job = created[("ray-workloads", "hello")]
    assert json.loads(job["spec"]["runtimeEnvYAML"])["working_dir"] == uri
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    zipped = boto3.client("s3", region_name=REGION).get_object(Bucket=bucket, Key=key)["Body"].read()
    assert "hello/train.py" in zipfile.ZipFile(io.BytesIO(zipped)).namelist()
    assert "hpray submit job --env dev --attach --name hello" in events[-1]["message"]
    spec = job["spec"]["rayClusterSpec"]
    images = {
        c["image"]
        for g in (spec["headGroupSpec"], *spec["workerGroupSpecs"])
        for c in g["template"]["spec"]["containers"]
    }
    assert images == {DEPLOYED}


DEPLOYED = "111111111111.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-container-assets-111111111111-us-west-2:deployed"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--working-dir", "."], "error: submit job needs the command to run after --"),
        (["--", "python", "x.py"], "error: submit job needs --working-dir DIR"),
        (
            ["--working-dir", ".", "--env-var", "NOEQUALS", "--", "python"],
            "error: --env-var 'NOEQUALS' is not KEY=VALUE",
        ),
        (["--working-dir", ".", "--gpus", "64", "--", "python"], "error: the job needs 16 ml.g5.12xlarge node(s)"),
    ],
)
def test_cli_submit_job_bad_arguments_fail_before_anything_is_uploaded(dev, argv, message, capsys):
    def no_kube(*_):
        raise AssertionError("nothing may be submitted")

    class NoAws:
        def call(self, *a, **k):
            raise AssertionError("nothing may be uploaded")

    code_ = main(
        ["submit", "job", "--env", "dev", *argv],
        aws_factory=lambda c, p: NoAws(),
        kube_factory=no_kube,
        load_config=lambda name: dev,
    )
    assert code_ == 2  # a bad command line (ops/errors.py)
    assert capsys.readouterr().err.startswith(message)


def test_command_after_dashes_only_for_submit_job(dev, capsys):
    assert main(["jobs", "--env", "dev", "--", "x"], load_config=lambda n: dev, aws_factory=lambda c, p: None) == 2
    assert "python -m ops jobs takes no command after --; only `submit job` runs one" in capsys.readouterr().err


# -- pods that cannot be scheduled ---------------------------------------------------------------


def pending_pod(name: str, message: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ray-workloads",
            "labels": {"ray.io/cluster": "hello-x7k2p", "ray.io/node-type": "worker"},
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": "2026-12-02T12:00:05Z",
                }
            ],
        },
    }


FAILED_SCHEDULING = (
    "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node "
    "affinity/selector. preemption: 0/4 nodes are available: 2 No preemption victims found for incoming pod, "
    "2 Preemption is not helpful for scheduling."
)


class SchedulingKube:
    """A RayJob stuck Initializing: its worker pod is Pending, refused by the scheduler."""

    def __init__(self):
        self.t = 0.0
        self.event_queries = []

    def get_ray(self, kind, namespace, name):
        return rayjob("initializing", name="hello")

    def list_pods(self, namespace, selector):
        if selector == "ray.io/cluster=hello-x7k2p":
            return [pending_pod("hello-x7k2p-gpu-workers-worker-abcde", "0/4 nodes are available")]
        return []

    def list_events(self, namespace, field_selector):
        self.event_queries.append(field_selector)
        return [
            {
                "kind": "Event",
                "reason": "FailedScheduling",
                "type": "Warning",
                "message": FAILED_SCHEDULING,
                "involvedObject": {"kind": "Pod", "name": "hello-x7k2p-gpu-workers-worker-abcde"},
                "lastTimestamp": "2026-12-02T12:00:06Z",
            }
        ]


def test_unschedulable_pod_is_named_with_the_schedulers_reason_then_exit_7():
    kube = SchedulingKube()
    out = io.StringIO()
    clock = {"t": 0.0}

    def sleep(s):
        clock["t"] += s

    follower = job_follow.JobFollower(
        kube,
        Target(workload="job", env="dev", kind="RayJob", namespace="ray-workloads", name="hello"),
        FollowOptions(poll_s=60, out=out, sleep=sleep, clock=lambda: clock["t"]),
        prog="hpray",
        unschedulable_grace_s=120,
    )
    with pytest.raises(UnschedulableError) as err:
        follower.run()
    text = out.getvalue()
    # Said once, as soon as it is seen; then the follower gives up after the grace period.
    assert text.count("cannot be scheduled") == 1
    assert f"hello: pod hello-x7k2p-gpu-workers-worker-abcde cannot be scheduled: {FAILED_SCHEDULING}" in text
    assert err.value.exit_code == 7
    assert err.value.message.startswith(
        "pod ray-workloads/hello-x7k2p-gpu-workers-worker-abcde of job hello has been unschedulable for 120 s: 0/4 nodes"
    )
    assert (
        kube.event_queries[0]
        == "involvedObject.kind=Pod,involvedObject.name=hello-x7k2p-gpu-workers-worker-abcde,reason=FailedScheduling"
    )


def test_unschedulable_exit_code_through_the_cli(dev, capsys):
    kube = SchedulingKube()
    clock = {"t": 0.0}

    def sleep(s):
        clock["t"] += s

    code_ = main(
        ["submit", "job", "--env", "dev", "--attach", "--name", "hello", "--poll-seconds", "200"],
        load_config=lambda n: dev,
        aws_factory=lambda c, p: None,
        kube_factory=lambda a, c, args: kube,
        sleep=sleep,
        clock=lambda: clock["t"],
    )
    assert code_ == 7
    err = capsys.readouterr().err
    assert "error: pod ray-workloads/hello-x7k2p-gpu-workers-worker-abcde of job hello has been unschedulable" in err
    assert "fix:   free or add capacity" in err


def test_unschedulable_pods_ignores_pods_that_wait_for_other_reasons():
    waiting_for_image = {
        "metadata": {"name": "p"},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
    }
    assert job_follow.unschedulable_pods([waiting_for_image, submitter_pod()]) == []
    assert job_follow.unschedulable_pods([pending_pod("w", "m")]) == [("w", "m")]
