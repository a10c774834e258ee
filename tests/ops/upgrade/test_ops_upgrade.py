"""``upgrade plan``: the steps of a one-minor upgrade of dev, its refusals, and ``--apply`` (read-only
checks, then the KubeRay CRDs server-side with a dry run first) against a local Kubernetes API."""

from __future__ import annotations

import functools
import http.server
import io
import json
import shutil
import subprocess
import threading
from datetime import date
from pathlib import Path

import pytest

import ops
from artifacts import pinned
from config import parse_environment, versions
from manifests import crd
from ops.cli import main
from ops.errors import OpsError
from ops.upgrade import kuberay_crds
from ops.upgrade import plan as upgrade
from tests.ops.fakes import addon_entry, env_data, pinned_addons, rayjob
from tests.ops.kube_api import KubeApi

# Loopback connections allowed (tests/ops/conftest.py no_network): the local Kubernetes API.
LOOPBACK_ALLOWED = True


@pytest.fixture
def dev():
    """dev one minor behind the newest version this app pins (the upgrade these tests plan)."""
    data = env_data("dev")
    assert data["eks"]["kubernetes_version"] == versions.newest_kubernetes_version() == "1.34"
    data["eks"]["kubernetes_version"] = "1.33"
    return parse_environment(data, source="test")


def test_one_minor_upgrade_of_dev_in_order(dev):
    header, steps = upgrade.plan(dev, on=date(2026, 12, 3))
    assert header == (
        "Upgrade plan for dev: Kubernetes 1.33 (extended support) -> 1.34 (extended support), "
        "EKS hpray-dev-eks, HyperPod hpray-dev-hyperpod, us-east-1"
    )
    titles = [s.title for s in steps]
    order = [
        "Read-only checks",
        "Pause running jobs",
        "Control plane 1.33 -> 1.34",
        "System nodes",
        "HyperPod software",
        "KubeRay CRDs",
        "Resume the paused jobs",
    ]
    assert [next(i for i, t in enumerate(titles) if t.startswith(o)) for o in order] == list(range(7))
    by = {s.title.split(" ")[0]: s for s in steps}
    assert all(s.disrupts for s in steps)
    # The control plane step is a config edit and one deploy; the add-on pins come from config/versions.py.
    cp = steps[2]
    assert cp.config_edit.startswith('config/dev.yaml: eks.kubernetes_version: "1.34"')
    assert (
        f"kube-proxy: {versions.ADDON_VERSIONS['1.33']['kube-proxy']} -> {versions.ADDON_VERSIONS['1.34']['kube-proxy']}"
        in cp.config_edit
    )
    assert cp.commands[-1] == "npx cdk deploy HprayDevCluster -c env=dev"
    assert (
        "aws eks update-nodegroup-version --cluster-name hpray-dev-eks --nodegroup-name system --kubernetes-version 1.34"
        in steps[3].commands[0]
    )
    hp = steps[4].commands[0]
    assert hp.startswith("aws sagemaker update-cluster-software --cluster-name hpray-dev-hyperpod")
    deployment = json.loads(hp.split("--deployment-config ", 1)[1].strip("'"))
    assert deployment == {
        "RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1}},
        "WaitIntervalInSeconds": 300,
    }
    # CRDs: from the pinned chart (no path of this checkout), a server-side dry run before the apply,
    # both before the operator chart.
    crds = steps[5].commands
    assert crds[0].startswith(
        "helm pull kuberay-operator --repo https://ray-project.github.io/kuberay-helm/ --version 1.7.0 "
        "--untar --untardir kuberay-operator-1.7.0"
    )
    files = (
        "-f kuberay-operator-1.7.0/kuberay-operator/crds/ray.io_rayclusters.yaml "
        "-f kuberay-operator-1.7.0/kuberay-operator/crds/ray.io_rayjobs.yaml "
        "-f kuberay-operator-1.7.0/kuberay-operator/crds/ray.io_rayservices.yaml"
    )
    assert crds[1] == (f"kubectl apply --server-side --force-conflicts --field-manager=hpray --dry-run=server {files}")
    assert crds[2] == f"kubectl apply --server-side --force-conflicts --field-manager=hpray {files}"
    assert "cdk deploy" in crds[3]
    assert not any("shared" in c for s in steps for c in s.commands)
    assert [s.number for s in steps if s.automatic] == [1, 6]
    assert by["Read-only"].disrupts == "nothing"


def test_the_deployment_config_is_what_the_sagemaker_api_takes(dev):
    """The JSON of the HyperPod step validates against botocore's UpdateClusterSoftware model."""
    import botocore.session
    from botocore.validate import ParamValidator

    _, steps = upgrade.plan(dev)
    deployment = json.loads(steps[4].commands[0].split("--deployment-config ", 1)[1].strip("'"))
    model = botocore.session.get_session().get_service_model("sagemaker").operation_model("UpdateClusterSoftware")
    report = ParamValidator().validate(
        {"ClusterName": "hpray-dev-hyperpod", "DeploymentConfig": deployment}, model.input_shape
    )
    assert not report.has_errors(), report.generate_report()


@pytest.mark.parametrize(
    ("to", "message"),
    [
        ("1.33", "--to 1.33: dev is already on Kubernetes 1.33"),
        ("1.32", "--to 1.32 is older than dev's Kubernetes 1.33; EKS cannot downgrade"),
        ("1.35", "--to 1.35: EKS upgrades one minor version at a time (1.33 -> 1.34)"),
    ],
)
def test_refused_targets(dev, to, message):
    with pytest.raises(OpsError) as err:
        upgrade.plan(dev, to)
    assert err.value.message == message


def test_next_minor_hyperpod_does_not_support_is_refused():
    data = env_data("dev")
    data["eks"]["kubernetes_version"] = "1.34"
    config = parse_environment(data, source="test")
    with pytest.raises(OpsError) as err:
        upgrade.plan(config)
    # No --to was given: the message speaks of the next minor version, not of a --to (issue 37).
    assert err.value.message == (
        "no upgrade from Kubernetes 1.34 to plan: the next minor version, 1.35: SageMaker HyperPod does not "
        "support it; allowed: 1.33, 1.34"
    )
    assert "--to" not in err.value.message
    assert err.value.fix.startswith("wait until HyperPod supports Kubernetes 1.35")
    # With --to, the message names the --to the user gave.
    with pytest.raises(OpsError) as err:
        upgrade.plan(config, "1.35")
    assert err.value.message == "--to 1.35: SageMaker HyperPod does not support it; allowed: 1.33, 1.34"


def test_two_minors_at_once_refused():
    data = env_data("dev")
    data["eks"]["kubernetes_version"] = "1.33"
    config = parse_environment(data, source="test")
    object.__setattr__(config.eks, "kubernetes_version", "1.32")  # a cluster still on an older minor
    with pytest.raises(OpsError) as err:
        upgrade.target_version(config, "1.34")
    assert err.value.message == "--to 1.34: EKS upgrades one minor version at a time (1.32 -> 1.33)"


def test_cli_plan_json(dev):
    out = io.StringIO()
    code = main(
        ["upgrade", "plan", "--env", "dev", "--json"],
        load_config=lambda n: dev,
        aws_factory=lambda c, p: FakeAws(),
        out=out,
    )
    assert code == 0
    data = json.loads(out.getvalue())
    assert len(data["steps"]) == 7 and data["steps"][0]["automatic"] is True


class FakeAws:
    """The three EKS calls of --apply, with API-shaped answers (``addons``: DescribeAddonVersions'
    add-ons for the target; default every pin offered)."""

    def __init__(self, insight_status="PASSING", addons=None):
        self.insight_status = insight_status
        self.addons = addons
        self.calls = []

    def call(self, service, method, **params):
        self.calls.append((service, method, params))
        assert (service, method) == ("eks", "describe_cluster")
        return {"cluster": {"name": params["name"], "version": "1.33", "status": "ACTIVE", "platformVersion": "eks.27"}}

    def paginate(self, service, method, key, **params):
        self.calls.append((service, method, params))
        if (service, method, key) == ("eks", "describe_addon_versions", "addons"):
            assert set(params) == {"kubernetesVersion"}
            return pinned_addons(params["kubernetesVersion"]) if self.addons is None else self.addons
        assert (service, method, key) == ("eks", "list_insights", "insights")
        return [
            {
                "id": "a1b2",
                "name": "Deprecated APIs removed in Kubernetes v1.34",
                "category": "UPGRADE_READINESS",
                "kubernetesVersion": "1.34",
                "insightStatus": {"status": self.insight_status, "reason": "No deprecated API usage detected"},
            }
        ]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _chart_repo(tmp_path, monkeypatch, edit=None):
    """A chart repository on 127.0.0.1 serving the real pinned KubeRay chart (the shared fixture,
    packaged by the real helm; ``edit`` may change the unpacked copy first), an empty user cache,
    and KUBERAY_OPERATOR pointing at that repository. Returns (stop, helm)."""
    chart = pinned.chart_dir("kuberay-operator")  # skipped with one line where it cannot be had
    helm = str(pinned.helm_binary())
    copy = tmp_path / "src" / "kuberay-operator"
    shutil.copytree(chart, copy)
    if edit:
        edit(copy)
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv(pinned.CACHE_ENV, str(tmp_path / "user-cache"))
    subprocess.run([helm, "package", str(copy), "-d", str(repo)], check=True, capture_output=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(repo)))
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    subprocess.run([helm, "repo", "index", str(repo), "--url", url], check=True, capture_output=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(versions, "KUBERAY_OPERATOR", versions.ChartPin("kuberay-operator", url, "1.7.0"))

    def stop():
        server.shutdown()
        server.server_close()

    return stop, helm


def test_the_crds_come_from_the_pinned_chart_verified_and_cached(tmp_path, monkeypatch):
    stop, helm = _chart_repo(tmp_path, monkeypatch)
    try:
        got = kuberay_crds.crd_dir(helm=helm)
    finally:
        stop()
    assert got == tmp_path / "user-cache" / "kuberay-crds" / "kuberay-operator-1.7.0"
    assert sorted(p.name for p in got.iterdir()) == list(versions.KUBERAY_CRDS.files)
    assert pinned.tree_digest(got, versions.KUBERAY_CRDS.files) == versions.KUBERAY_CRDS.digest
    # The repository is gone: the verified cache answers without helm.
    assert kuberay_crds.crd_dir(helm="/nonexistent/helm") == got
    # A changed cache is not trusted: fetched again (here: the repository is gone, so helm fails).
    (got / "ray.io_rayjobs.yaml").write_text("kind: Tampered\n")
    with pytest.raises(OpsError) as err:
        kuberay_crds.crd_dir(helm=helm)
    assert err.value.message.startswith(
        f"helm pull of kuberay-operator 1.7.0 from {versions.KUBERAY_OPERATOR.repository} failed: "
    )


def test_a_chart_whose_crds_differ_from_the_pin_is_refused_and_nothing_applied(tmp_path, monkeypatch, dev):
    def tamper(chart: Path) -> None:
        crd_file = chart / "crds" / "ray.io_rayjobs.yaml"
        crd_file.write_text(crd_file.read_text() + "# changed\n")

    stop, helm = _chart_repo(tmp_path, monkeypatch, tamper)
    monkeypatch.setattr(kuberay_crds.shutil, "which", lambda name: helm)
    try:
        with KubeApi() as api, pytest.raises(OpsError) as err:
            upgrade.apply_safe_steps(dev, FakeAws(), api.client(), "1.34", emit=lambda text: None)
        assert api.state.crd_applies == []
    finally:
        stop()
    assert err.value.message.startswith(
        f"the CRDs of the kuberay-operator 1.7.0 chart from {versions.KUBERAY_OPERATOR.repository} have digest "
    )
    assert err.value.message.endswith(f"config/versions.py pins {versions.KUBERAY_CRDS.digest} for KubeRay 1.7.0")
    assert not (tmp_path / "user-cache" / "kuberay-crds" / "kuberay-operator-1.7.0").exists()


def test_ops_never_reads_the_test_fixtures_folder():
    """A user's checkout has no ../shared: no product module of the CLI names it."""
    ops_dir = Path(ops.__file__).parent
    assert [p.name for p in sorted(ops_dir.rglob("*.py")) if "shared/" in p.read_text()] == []


def test_apply_checks_then_applies_the_crds_after_a_dry_run(dev, tmp_path, monkeypatch):
    stop, helm = _chart_repo(tmp_path, monkeypatch)
    monkeypatch.setattr(kuberay_crds.shutil, "which", lambda name: helm)
    try:
        _apply_checks_then_applies(dev)
    finally:
        stop()


def _apply_checks_then_applies(dev):
    with KubeApi() as api:
        api.state.rayjobs[("ray-workloads", "hello")] = rayjob("running", name="hello")
        aws = FakeAws()
        out = io.StringIO()
        code = main(
            ["upgrade", "plan", "--env", "dev", "--apply"],
            load_config=lambda n: dev,
            aws_factory=lambda c, p: aws,
            kube_factory=lambda a, c, args: api.client(),
            out=out,
        )
        text = out.getvalue()
        assert code == 0, text
        names = sorted(d["metadata"]["name"] for d in upgrade.crd_documents())
        assert names == ["rayclusters.ray.io", "rayjobs.ray.io", "rayservices.ray.io"]
        # Every dry run before any real apply; the real CRDs are the ones of the pinned release.
        assert api.state.crd_applies == [(n, True, "hpray") for n in names] + [(n, False, "hpray") for n in names]
        assert api.state.crds["rayjobs.ray.io"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"] == crd.schema(
            "RayJob"
        )
        assert "running jobs to pause before step 3: hello" in text
        assert (
            "eks",
            "list_insights",
            {"clusterName": "hpray-dev-eks", "filter": {"kubernetesVersions": ["1.34"]}},
        ) in aws.calls


def test_apply_stops_before_any_change_on_a_blocking_insight(dev, capsys):
    with KubeApi() as api:
        code = main(
            ["upgrade", "plan", "--env", "dev", "--apply"],
            load_config=lambda n: dev,
            aws_factory=lambda c, p: FakeAws("ERROR"),
            kube_factory=lambda a, c, args: api.client(),
            out=io.StringIO(),
        )
        assert code == 1
        assert api.state.crd_applies == []
    assert "error: 1 EKS upgrade insight(s) for 1.34 are ERROR" in capsys.readouterr().err


def test_apply_checks_the_target_addon_builds_and_names_the_builds_to_move_to(dev, capsys):
    """A build pinned for the target that EKS does not offer for it stops --apply before any
    change, naming the add-on, the pin, EKS's builds for the target and the one to move to."""
    addons = [a for a in pinned_addons("1.34") if a["addonName"] != "kube-proxy"]
    addons.append(addon_entry("kube-proxy", ["v1.34.1-eksbuild.3", "v1.34.0-eksbuild.10"], "1.34"))
    aws = FakeAws(addons=addons)
    out = io.StringIO()
    with KubeApi() as api:
        code = main(
            ["upgrade", "plan", "--env", "dev", "--apply"],
            load_config=lambda n: dev,
            aws_factory=lambda c, p: aws,
            kube_factory=lambda a, c, args: api.client(),
            out=out,
        )
        assert code == 1
        assert api.state.crd_applies == []
    captured = capsys.readouterr()
    pin = versions.ADDON_VERSIONS["1.34"]["kube-proxy"]
    assert (
        f"FAIL add-on kube-proxy: kube-proxy {pin} (pinned for Kubernetes 1.34) is not a build EKS offers for "
        "Kubernetes 1.34 in us-east-1, so CreateAddon would fail and roll the cluster stack back; EKS offers: "
        "v1.34.1-eksbuild.3, v1.34.0-eksbuild.10 (default v1.34.1-eksbuild.3)"
    ) in out.getvalue()
    assert "add-on builds pinned for 1.34: 6 offered by EKS, 1 not" in out.getvalue()
    assert (
        "error: EKS does not offer the build config/versions.py pins for Kubernetes 1.34 of kube-proxy" in captured.err
    )
    assert "set ADDON_VERSIONS['1.34']['kube-proxy'] in config/versions.py to v1.34.1-eksbuild.3" in captured.err
    assert ("eks", "describe_addon_versions", {"kubernetesVersion": "1.34"}) in aws.calls


def test_apply_calls_exactly_the_documented_actions(dev, tmp_path):
    import boto3

    from config.facts import permissions
    from ops.clients.aws import iam_action

    aws = FakeAws()
    with KubeApi() as api:
        api.state.rayjobs[("ray-workloads", "hello")] = rayjob("running", name="hello")
        upgrade.apply_safe_steps(
            dev, aws, api.client(), "1.34", emit=lambda text: None, crd_dir=tmp_path
        )  # no CRDs: only the AWS calls
    client = boto3.client("eks", region_name="us-east-1")
    assert sorted({iam_action(client, method) for _, method, _ in aws.calls}) == sorted(permissions.UPGRADE_APPLY)


def test_plan_names_the_build_to_move_to_where_eks_does_not_offer_the_target_pin(dev):
    """Without --apply too: the control plane step's add-on moves name, for a pin EKS does not
    offer for the target, EKS's builds and the one to move to."""
    addons = [a for a in pinned_addons("1.34") if a["addonName"] != "aws-fsx-csi-driver"]
    addons.append(addon_entry("aws-fsx-csi-driver", ["v1.8.0-eksbuild.1", "v1.7.1-eksbuild.2"], "1.34"))
    aws = FakeAws(addons=addons)
    out = io.StringIO()
    code = main(["upgrade", "plan", "--env", "dev"], load_config=lambda n: dev, aws_factory=lambda c, p: aws, out=out)
    assert code == 0
    text = out.getvalue()
    assert (
        text.splitlines()[1] == "add-on builds checked against the builds EKS offers for Kubernetes 1.34 in us-east-1"
    )
    pin = versions.ADDON_VERSIONS["1.34"]["aws-fsx-csi-driver"]
    assert (
        f"aws-fsx-csi-driver: {versions.ADDON_VERSIONS['1.33']['aws-fsx-csi-driver']} -> {pin} [EKS does not offer "
        f"{pin} for 1.34; it offers v1.8.0-eksbuild.1, v1.7.1-eksbuild.2: move ADDON_VERSIONS['1.34']"
        "['aws-fsx-csi-driver'] to v1.8.0-eksbuild.1]"
    ) in text
    assert ("eks", "describe_addon_versions", {"kubernetesVersion": "1.34"}) in aws.calls
    import boto3

    from config.facts import permissions
    from ops.clients.aws import iam_action

    client = boto3.client("eks", region_name="us-east-1")
    assert tuple(sorted({iam_action(client, m) for _, m, _ in aws.calls})) == permissions.UPGRADE_PLAN


def test_plan_without_aws_access_prints_the_pins_and_says_why(dev):
    from ops.errors import CredentialsError

    class NoCredentials:
        def paginate(self, *args, **kwargs):
            raise CredentialsError("no AWS credentials found", "sign in")

    out = io.StringIO()
    code = main(
        ["upgrade", "plan", "--env", "dev"],
        load_config=lambda n: dev,
        aws_factory=lambda c, p: NoCredentials(),
        out=out,
    )
    assert code == 0
    lines = out.getvalue().splitlines()
    assert lines[1] == "add-on builds not checked against EKS (no AWS credentials found); --apply checks them"
    old, new = versions.ADDON_VERSIONS["1.33"]["kube-proxy"], versions.ADDON_VERSIONS["1.34"]["kube-proxy"]
    assert (
        f'   config:   config/dev.yaml: eks.kubernetes_version: "1.34"  (add-ons: kube-proxy: {old} -> {new}; '
        "kubectl layer v34)"
    ) in lines
