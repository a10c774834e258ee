"""The HyperPod stack as a whole: gates (cdk-nag inside synth, cfn-lint, checkov), determinism,
the single place of the execution role's EKS access entry, and rendering of optional settings."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, make_app, new_app

ENVS = ("dev", "staging", "prod")
VENV_BIN = ROOT / ".venv" / "bin"
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"


def hyperpod_template(synthesized, env):
    assembly, _config, stacks = synthesized(env)
    artifact = assembly.get_stack_by_name(stacks.hyperpod.stack_name)
    return Path(assembly.directory) / artifact.template_file, artifact.template


@pytest.mark.parametrize("env", ENVS)
def test_synth_passes_cdk_nag_with_no_open_findings(synthesized, env):
    # cdk-nag (AwsSolutions + NIST 800-53 R5) runs as a validation plugin inside synth: a single
    # unacknowledged finding makes synth raise, so reaching here means none is open.
    assembly, _, stacks = synthesized(env)
    report = json.loads((Path(assembly.directory) / "validation-report.json").read_text())
    # The annotations allowed: the extended-support cost warning of an environment that has not
    # acknowledged it and the checkpoint-interval warning (tests/stacks/test_environments.py
    # checks exactly when each is expected).
    rules = [v["ruleName"] for p in report["pluginReports"] for v in p["violations"]]
    assert set(rules) <= {"Annotation::hpray:eks-extended-support", "Annotation::hpray:checkpoint-interval"}
    assert not any(p["pluginName"] != "Construct Annotations" for p in report["pluginReports"])
    assert assembly.get_stack_by_name(stacks.hyperpod.stack_name).template["Resources"]


def test_cfn_lint_passes_against_the_sagemaker_cluster_schema(synthesized, tmp_path):
    files = []
    for env in ENVS:
        path, _ = hyperpod_template(synthesized, env)
        files.append(shutil.copy(path, tmp_path / f"{env}.template.json"))
    result = subprocess.run([str(VENV_BIN / "cfn-lint"), *map(str, files)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_checkov_passes(synthesized, tmp_path):
    for env in ENVS:
        path, _ = hyperpod_template(synthesized, env)
        shutil.copy(path, tmp_path / f"{env}.template.json")
    env_vars = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"}
    result = subprocess.run(
        [
            str(CHECKOV),
            "--directory",
            str(tmp_path),
            "--framework",
            "cloudformation",
            "--compact",
            "--skip-download",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env_vars,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    assert all(r["summary"]["failed"] == 0 for r in reports)
    skipped = [c for r in reports for c in r["results"].get("skipped_checks", [])]
    assert sum(r["summary"]["skipped"] for r in reports) == len(skipped) == 3 * len(ENVS)
    # Only the upload Lambda carries skips, each with its comment.
    assert {c["check_id"] for c in skipped} == {"CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_173"}


@pytest.mark.parametrize("env", ENVS)
def test_no_access_entry_for_the_execution_role_anywhere(synthesized, env):
    # HyperPod creates the execution role's access entry itself (see constructs/hyperpod_cluster.py);
    # a second one, from any stack, would collide with it.
    assembly, _, stacks = synthesized(env)
    role_ref = stacks.hyperpod.execution_role
    role_logical = stacks.hyperpod.get_logical_id(role_ref.node.default_child)
    for artifact in assembly.stacks:
        for logical_id, resource in artifact.template["Resources"].items():
            if resource["Type"] == "AWS::EKS::AccessEntry":
                assert role_logical not in json.dumps(resource["Properties"]["PrincipalArn"]), (
                    artifact.stack_name,
                    logical_id,
                )


@pytest.mark.parametrize("env", ENVS)
def test_stack_order_and_protection(synthesized, env):
    _, config, stacks = synthesized(env)
    hp = stacks.hyperpod
    assert {s.stack_name for s in hp.dependencies} == {
        stacks.network.stack_name,
        stacks.storage.stack_name,
        stacks.cluster.stack_name,
    }
    assert hp.termination_protection is config.production


@pytest.mark.parametrize("env", ENVS)
def test_cluster_comes_after_the_hyperpod_dependency_charts(synthesized, env):
    # AWS requires the HyperPod dependency charts before the HyperPod cluster is created. They live
    # in the EKS stack, so the cluster's dependency on them orders the HyperPod stack after it.
    from aws_cdk import Stack

    _, _, stacks = synthesized(env)
    charts = stacks.cluster.hyperpod_dependencies
    assert charts
    assert all(Stack.of(c) is stacks.cluster for c in charts)
    cluster_deps = {d.node.path for d in stacks.hyperpod.hyperpod.cluster.node.dependencies}
    assert {c.node.path for c in charts} <= cluster_deps
    template = stacks.hyperpod.resolve(stacks.hyperpod.hyperpod.cluster.orchestrator)
    assert template == {"eks": {"clusterArn": stacks.hyperpod.resolve(stacks.cluster.cluster.cluster_arn)}}
    assert "Fn::ImportValue" in json.dumps(template)


def test_synth_is_deterministic(tmp_path):
    outs = []
    for run in ("a", "b"):
        out = tmp_path / run
        app, _, stacks = make_app("prod", out)
        app.synth()
        outs.append((out, stacks.hyperpod.stack_name))
    (a, name), (b, _) = outs
    assert (a / f"{name}.template.json").read_bytes() == (b / f"{name}.template.json").read_bytes()
    assets = json.loads((a / f"{name}.assets.json").read_text())["files"]
    for asset in assets.values():
        src = asset["source"]["path"]
        if (a / src).is_dir():
            cmp = filecmp.dircmp(a / src, b / src)
            assert not (cmp.diff_files or cmp.left_only or cmp.right_only), src
        else:
            assert (a / src).read_bytes() == (b / src).read_bytes(), src


def test_optional_settings_render_as_the_schema_wants(tmp_path):
    from app import build_app
    from config import parse_environment
    from config.loader import CONFIG_DIR

    data = yaml.safe_load((CONFIG_DIR / "prod.yaml").read_text())
    data["name"] = "prod"
    data["hyperpod"]["node_recovery"] = "None"
    # node_provisioning_mode stays Continuous: with the platform's customer-managed key for EBS,
    # null is a config error (tests/config/test_cross_checks.py).
    data["hyperpod"]["instance_groups"] += [
        {
            "name": "train-planned",
            "instance_type": "ml.p5.48xlarge",
            "instance_count": 2,
            "training_plan_arn": "arn:aws:sagemaker:us-east-1:333333333333:training-plan/q1-reservation",
            "deep_health_checks": [],
            "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
        },
        {"name": "cpu-utility", "instance_type": "ml.m5.xlarge", "instance_count": 0},
    ]
    config = parse_environment(data)
    app = new_app(tmp_path, env="prod")
    stacks = build_app(app, config)
    template = app.synth().get_stack_by_name(stacks.hyperpod.stack_name).template
    (cluster,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster"]
    props = cluster["Properties"]
    assert props["NodeRecovery"] == "None"
    assert props["NodeProvisioningMode"] == "Continuous"
    groups = {g["InstanceGroupName"]: g for g in props["InstanceGroups"]}
    planned, cpu = groups["train-planned"], groups["cpu-utility"]
    assert planned["TrainingPlanArn"] == "arn:aws:sagemaker:us-east-1:333333333333:training-plan/q1-reservation"
    assert "OnStartDeepHealthChecks" not in planned and "OnStartDeepHealthChecks" not in cpu
    # An empty taint value is omitted (the schema's Value needs at least one character).
    assert planned["KubernetesConfig"] == {"Taints": [{"Key": "nvidia.com/gpu", "Effect": "NoSchedule"}]}
    assert "KubernetesConfig" not in cpu and "OverrideVpcConfig" not in cpu
    assert cpu["InstanceCount"] == 0
    path = tmp_path / f"{stacks.hyperpod.stack_name}.template.json"
    lint = subprocess.run([str(VENV_BIN / "cfn-lint"), str(path)], capture_output=True, text=True, cwd=ROOT)
    assert lint.returncode == 0, lint.stdout
