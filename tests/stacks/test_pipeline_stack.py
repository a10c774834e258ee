"""The delivery pipeline: one Stage class per environment in config order, production gates,
cross-account keys, termination protection, and the gates reaching the stacks inside Stages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cdk_context, checkov_command, new_app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pipeline_app(tmp_path_factory):
    from app import build_pipeline_app
    from stacks.pipeline_config import load_pipeline

    out = tmp_path_factory.mktemp("pipeline-cdk-out")
    app = new_app(out, pipeline="true")
    stack = build_pipeline_app(app, *load_pipeline())
    assembly = app.synth()  # raises if cdk-nag finds anything unacknowledged, Stages included
    template = json.loads((out / f"{stack.artifact_id}.template.json").read_text())
    return stack, assembly, template, out


def _pipeline_stages(template):
    pipe = next(r for r in template["Resources"].values() if r["Type"] == "AWS::CodePipeline::Pipeline")
    return pipe["Properties"]["Stages"]


def test_one_stage_per_environment_in_config_order(pipeline_app):
    _stack, _, template, _ = pipeline_app
    names = [s["Name"] for s in _pipeline_stages(template)]
    assert names[:3] == ["Source", "Build", "UpdatePipeline"]
    assert [n for n in names if n in ("Dev", "Staging", "Prod")] == ["Dev", "Staging", "Prod"]
    assert names.index("Dev") < names.index("Staging") < names.index("Prod")


def test_same_stage_class_builds_every_environment(pipeline_app):
    from stacks.pipeline_stack import PlatformStage

    stack, _, _, _ = pipeline_app
    assert [type(s) for s in stack.stages] == [PlatformStage] * 3
    assert [s.config.name for s in stack.stages] == ["dev", "staging", "prod"]
    shapes = [[type(st).__name__ for st in (s.platform.network, s.platform.storage)] for s in stack.stages]
    assert shapes[0] == shapes[1] == shapes[2] == ["NetworkStack", "StorageStack"]


def _actions(template, stage_name):
    stage = next(s for s in _pipeline_stages(template) if s["Name"] == stage_name)
    return [
        (a["Name"], a["ActionTypeId"]["Category"], a["ActionTypeId"]["Provider"], a["RunOrder"])
        for a in stage["Actions"]
    ]


def test_production_stage_checks_broadening_then_waits_for_approval_then_deploys(pipeline_app):
    _, _, template, _ = pipeline_app
    actions = {a[0]: a for a in _actions(template, "Prod")}
    preflight = actions.pop("PreflightProd")
    check = actions.pop("ConfirmPermissionsBroadening.Check")
    confirm = actions.pop("ConfirmPermissionsBroadening.Confirm")  # auto-approved unless IAM/SG broaden
    approval = actions.pop("ApproveProduction")
    assert check[1:3] == ("Build", "CodeBuild") and confirm[1:3] == approval[1:3] == ("Approval", "Manual")
    deploys = list(actions.values())
    assert deploys and {a[2] for a in deploys} == {"CloudFormation"}
    assert preflight[1:3] == ("Build", "CodeBuild")
    assert preflight[3] < check[3] < confirm[3] < approval[3] < min(a[3] for a in deploys)


@pytest.mark.parametrize("stage", ["Dev", "Staging"])
def test_non_production_stages_deploy_without_gates(pipeline_app, stage):
    _, _, template, _ = pipeline_app
    actions = _actions(template, stage)
    assert not [a for a in actions if a[1] == "Approval" or a[0].startswith("ConfirmPermissionsBroadening")]
    [preflight] = [a for a in actions if a[0] == f"Preflight{stage}"]
    deploys = [a for a in actions if a != preflight]
    assert {a[2] for a in deploys} == {"CloudFormation"}
    assert preflight[1:3] == ("Build", "CodeBuild") and preflight[3] < min(a[3] for a in deploys)


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_each_stage_runs_hpray_preflight_with_its_lookup_role_before_its_stacks(pipeline_app, env):
    """The checks of a manual deploy's step 2 (credential secret and pull-through rules, quotas,
    bootstrap, ...) run before every stage, signed in to the stage's account with its CDK lookup
    role, which is the only role the step's project may assume."""
    from config import load_environment

    config = load_environment(env)
    _, _, template, _ = pipeline_app
    lookup = f"role/cdk-hnb659fds-lookup-role-{config.account}-{config.region}"
    [project] = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CodeBuild::Project"
        and f"hpray preflight --env {env} --config-dir config --profile stage-lookup" in json.dumps(r)
    ]
    spec = json.dumps(project["Source"]["BuildSpec"])
    assert lookup in spec and "credential_source = EcsContainer" in spec
    assert "pip install --quiet --disable-pip-version-check ." in spec
    role = project["ServiceRole"]["Fn::GetAtt"][0]
    assumes = [
        json.dumps(s["Resource"])
        for p in template["Resources"].values()
        if p["Type"] == "AWS::IAM::Policy" and {"Ref": role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if "sts:AssumeRole" in s["Action"]
    ]
    assert len(assumes) == 1 and lookup in assumes[0]


def test_source_connection_and_synth_commands_from_config(pipeline_app):
    from stacks.pipeline_config import load_pipeline

    pipeline, _ = load_pipeline()
    _, _, template, _ = pipeline_app
    source = _pipeline_stages(template)[0]["Actions"][0]
    assert source["ActionTypeId"]["Provider"] == "CodeStarSourceConnection"
    assert source["Configuration"]["ConnectionArn"] == pipeline.source.connection_arn
    assert source["Configuration"]["FullRepositoryId"] == pipeline.source.repository
    assert source["Configuration"]["BranchName"] == pipeline.source.branch
    buildspecs = [
        r["Properties"]["Source"]["BuildSpec"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CodeBuild::Project" and "make pipeline" in r["Properties"]["Source"].get("BuildSpec", "")
    ]
    assert len(buildspecs) == 1
    spec = json.loads(buildspecs[0])
    assert spec["phases"]["build"]["commands"] == ["make pipeline"]


def _codebuild_projects(template):
    return {lid: r["Properties"] for lid, r in template["Resources"].items() if r["Type"] == "AWS::CodeBuild::Project"}


def test_synth_step_synthesizes_only_on_a_sized_host(pipeline_app):
    """The synth project runs `make pipeline` and no test suite, on the compute type and with the
    timeout stacks/pipeline_stack.py sizes from the measurement, on the named image and runtimes,
    after installing the document checkers by checksum."""
    from config import versions

    _, _, template, _ = pipeline_app
    projects = _codebuild_projects(template)
    synth = [p for p in projects.values() if "make pipeline" in json.dumps(p["Source"].get("BuildSpec", ""))]
    assert len(synth) == 1
    props = synth[0]
    spec = json.loads(props["Source"]["BuildSpec"])
    commands = spec["phases"]["build"]["commands"]
    assert commands == ["make pipeline"] and not any("make test" in c for c in commands)
    assert props["Environment"]["ComputeType"] == "BUILD_GENERAL1_SMALL"
    assert props["TimeoutInMinutes"] == 20
    assert spec["phases"]["install"]["runtime-versions"] == {
        "python": versions.PIPELINE_PYTHON_RUNTIME,
        "nodejs": versions.PIPELINE_NODEJS_RUNTIME,
    }
    install = spec["phases"]["install"]["commands"]
    for release in (versions.PROMETHEUS_RELEASE, versions.ALERTMANAGER_RELEASE):
        archive = "/tmp/" + release.url.rsplit("/", 1)[-1]
        # Downloaded, checked, then unpacked: in that order.
        assert install.index(f"curl -fsSL --retry 3 -o {archive} {release.url}") < install.index(
            f'echo "{release.sha256}  {archive}" | sha256sum -c -'
        )
        assert len(release.sha256) == 64 and int(release.sha256, 16) >= 0
    assert {p["Environment"]["Image"] for p in projects.values()} == {versions.PIPELINE_BUILD_IMAGE}


def test_every_pipeline_project_installs_the_pinned_cdk_cli(pipeline_app):
    """Self-mutation, the security check and asset publishing install the CLI package.json pins
    and a pinned cdk-assets: no unpinned or @latest install in any buildspec."""
    import re

    from config import versions

    cli = json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
    assert versions.cdk_cli_version() == cli
    _, _, template, _ = pipeline_app
    installs: dict[str, list[str]] = {}
    for lid, props in _codebuild_projects(template).items():
        spec = json.dumps(props["Source"].get("BuildSpec", ""))
        installs[lid] = re.findall(r"npm (?:install|i) -g ([^\\\"]+)", spec)
    flat = [pkg for pkgs in installs.values() for pkg in pkgs]
    assert flat and "@latest" not in " ".join(flat)
    assert all(re.fullmatch(r"(aws-cdk@\d+\.\d+\.\d+|cdk-assets@\d+\.\d+\.\d+)", p) for p in flat), installs
    by_kind = {kind: {p for p in flat if p.startswith(kind + "@")} for kind in ("aws-cdk", "cdk-assets")}
    assert by_kind == {"aws-cdk": {f"aws-cdk@{cli}"}, "cdk-assets": {f"cdk-assets@{versions.CDK_ASSETS_VERSION}"}}
    kinds = {lid: pkgs for lid, pkgs in installs.items() if pkgs}
    assert any("SelfMutation" in lid for lid in kinds) and any("SecurityCheck" in lid for lid in kinds)
    assert any("Asset" in lid for lid in kinds)


def test_cross_account_keys_for_stages_in_other_accounts(pipeline_app):
    _, _, template, _ = pipeline_app
    keys = [r for r in template["Resources"].values() if r["Type"] == "AWS::KMS::Key"]
    assert len(keys) == 1 and keys[0]["Properties"]["EnableKeyRotation"] is True
    bucket = next(r for r in template["Resources"].values() if r["Type"] == "AWS::S3::Bucket")
    enc = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0][
        "ServerSideEncryptionByDefault"
    ]
    assert enc["SSEAlgorithm"] == "aws:kms"


def test_termination_protection_on_production_stacks_only(pipeline_app):
    stack, _, _, _ = pipeline_app
    for stage in stack.stages:
        for st in (stage.platform.network, stage.platform.storage):
            assert st.termination_protection is stage.config.production, st.node.path
    assert stack.stages[2].platform.storage.termination_protection is True


def test_stage_stacks_deploy_into_their_environment_accounts(pipeline_app):
    stack, assembly, _, _ = pipeline_app
    accounts = {s.config.name: s.config.account for s in stack.stages}
    for stage in stack.stages:
        nested = assembly.get_nested_assembly(f"assembly-{stack.artifact_id}-{stage.node.id}")
        assert {s.environment.account for s in nested.stacks} == {accounts[stage.config.name]}


def test_cdk_nag_plugin_reaches_stacks_inside_stages(tmp_path):
    """A deliberate finding inside a Stage fails synth: the App-level validation plugin reaches it."""
    import aws_cdk as cdk
    from aws_cdk import aws_s3 as s3

    from config import load_environment
    from constructs.compliance import register_compliance_checks
    from stacks.pipeline_stack import PlatformStage

    app = cdk.App(context=cdk_context(), outdir=str(tmp_path))
    stage = PlatformStage(app, "Dev", config=load_environment("dev"))
    s3.Bucket(stage.platform.storage, "Deliberate")
    register_compliance_checks(app)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    flagged = {
        (v["ruleName"], c["constructPath"])
        for pr in report["pluginReports"]
        for v in pr["violations"]
        for c in v["violatingConstructs"]
    }
    assert ("AwsSolutions-S1", "Dev/HprayDevStorage/Deliberate/Resource") in flagged
    assert ("NIST.800.53.R5-S3DefaultEncryptionKMS", "Dev/HprayDevStorage/Deliberate/Resource") in flagged
    # Only the deliberate bucket: the real stage stacks are clean (dev's extended-support cost
    # warning is an annotation, not a finding).
    findings = {p for rule, p in flagged if not rule.startswith("Annotation::")}
    assert findings == {"Dev/HprayDevStorage/Deliberate/Resource"}
    assert {r for r, _ in flagged if r.startswith("Annotation::")} == {"Annotation::hpray:eks-extended-support"}


def test_cfn_lint_and_checkov_pass_on_every_stage_template(pipeline_app):
    _, _, _, out = pipeline_app
    templates = sorted(str(p) for p in out.glob("**/*.template.json"))
    import dataclasses

    from stacks.platform import PlatformStacks

    # The pipeline + every platform stack (network, storage, cluster, hyperpod) per environment.
    assert len(templates) == 1 + 3 * len(dataclasses.fields(PlatformStacks))
    # Both gates at once (they are independent): the same commands as `make pipeline`.
    lint = subprocess.Popen(
        [str(Path(sys.executable).parent / "cfn-lint"), *templates],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    checkov = subprocess.Popen(
        checkov_command(out),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={"BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false", "PATH": "/usr/bin:/bin"},
    )
    lint_out, _ = lint.communicate(timeout=300)
    checkov_out, _ = checkov.communicate(timeout=300)
    assert lint.returncode == 0, lint_out
    assert checkov.returncode == 0, checkov_out[-3000:]
    assert "Failed checks: 0" in checkov_out


def test_review_report_per_stage_environment(pipeline_app, tmp_path):
    from config import load_environment
    from constructs.chart_pods import chart_pods
    from review.__main__ import main

    _, _, _, out = pipeline_app
    # The review renders the Helm releases' pods with the pinned charts: without them (a plain
    # clone, offline) this raises ArtifactUnavailable, which reports the test skipped in one line.
    for name in ("staging", "prod"):
        chart_pods(load_environment(name))
    assert main([str(out), "--out", str(tmp_path), "--no-diagram"]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.md")) == ["PlatformPipeline.md", "dev.md", "prod.md", "staging.md"]
    prod = (tmp_path / "prod.md").read_text()
    assert "termination protection on" in prod and "Prod/HprayProdStorage" in prod
    # Every Stage's documents went through their engines (review/engines.py), so `make pipeline`
    # fails on a document that synth of one environment would fail on.
    for env in ("dev", "staging", "prod"):
        assert "Documents checked by their engines: 3, rejected: 0" in (tmp_path / f"{env}.md").read_text(), env


def test_asset_stage_builds_and_pushes_the_workloads_image(pipeline_app):
    """The pipeline's Assets stage builds the workloads image (workloads/Dockerfile) once in a
    privileged (Docker) CodeBuild project and pushes it into every environment's account."""
    from manifests import image

    _, _, template, out = pipeline_app
    assets = next(s for s in _pipeline_stages(template) if s["Name"] == "Assets")
    assert "workloads_image" in [a["Name"] for a in assets["Actions"]]
    projects = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CodeBuild::Project" and r["Properties"]["Environment"].get("PrivilegedMode")
    ]
    assert len(projects) == 2  # one per image: the workloads image and the NVIDIA device plugin
    # On a host sized for the CUDA image's build and pushes, not CodeBuild's 2-vCPU default with
    # its 60-minute limit (stacks/pipeline_stack.py ASSET_COMPUTE_TYPE states the estimate).
    for project in projects:
        assert project["Properties"]["Environment"]["ComputeType"] == "BUILD_GENERAL1_LARGE"
        assert project["Properties"]["TimeoutInMinutes"] == 120
    images = []
    for manifest in out.glob("assembly-*/*.assets.json"):
        images += json.loads(manifest.read_text()).get("dockerImages", {}).values()
    workloads = [i for i in images if i["source"].get("dockerFile") == image.DOCKERFILE]
    assert len({next(iter(i["destinations"].values()))["imageTag"] for i in workloads}) == 1
    assert len(workloads) == 3  # one per environment (each into its own account's repository)
    # The NVIDIA device plugin of the two closed networks (staging, prod): constructs/device_plugin_image.py.
    assert sorted(i["displayName"] for i in images if i not in workloads) == ["NVIDIA device plugin"] * 2


def test_the_asset_stage_signs_in_to_docker_hub_with_the_named_secret(pipeline_app):
    """The image-publishing project pulls from Docker Hub signed in with the operator's
    {"username", "accessToken"} secret (config/pipeline.yaml), and may read only that secret;
    synth and self-mutation get no credential."""
    from stacks.pipeline_config import load_pipeline

    _, _, template, _ = pipeline_app
    arn = load_pipeline()[0].docker_hub_credential_secret_arn
    projects = {lid: r for lid, r in template["Resources"].items() if r["Type"] == "AWS::CodeBuild::Project"}
    with_creds = [lid for lid, r in projects.items() if arn in json.dumps(r["Properties"]["Source"])]
    docker = [lid for lid, r in projects.items() if r["Properties"]["Environment"].get("PrivilegedMode")]
    # CDK Pipelines writes the asset-publishing credential into every asset project, and no other.
    assert set(docker) <= set(with_creds) and len(docker) == 2
    assert all("Assets" in lid for lid in with_creds)
    assert not [lid for lid in with_creds if "Synth" in lid or "SelfMutat" in lid or "UpdatePipeline" in lid]
    for lid in docker:
        spec = json.loads(projects[lid]["Properties"]["Source"]["BuildSpec"])
        creds = next(c for c in spec["phases"]["pre_build"]["commands"] if "cdk-docker-creds.json" in c)
        config = json.loads(creds.split("'")[1])["domainCredentials"]
        assert config == {
            "https://index.docker.io/v1/": {
                "secretsManagerSecretId": arn,
                "secretsUsernameField": "username",
                "secretsPasswordField": "accessToken",
            }
        }
    readers = [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if arn in json.dumps(s.get("Resource"))
    ]
    assert readers and all(
        set([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
        <= {"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}
        for s in readers
    )
