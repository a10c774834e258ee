"""Every environment synthesizes with every gate green: cdk-nag (inside synth), cfn-lint,
checkov; synth is deterministic and needs no lookups."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from manifests import registry
from tests.conftest import checkov_command

ROOT = Path(__file__).resolve().parents[2]
ENVIRONMENTS = ["dev", "staging", "prod"]
VENV_BIN = Path(sys.executable).parent


def assembly_dir(synthesized, env: str) -> Path:
    assembly, _, _ = synthesized(env)
    return Path(assembly.directory)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_synth_has_no_unacknowledged_findings(env, synthesized):
    """cdk-nag AwsSolutions and NIST 800-53 R5 ran (synth raises on any error finding) and
    left no warning either; no construct annotation warnings or errors remain, except the
    extended-support cost warning where the config has not acknowledged it and the checkpoint
    interval warning where a production interval is far from the optimum (sizing/goodput.py)."""
    from config import versions
    from sizing.plan import checkpoint_interval_warning

    out = assembly_dir(synthesized, env)
    _, config, _ = synthesized(env)
    cost_warning = versions.in_extended_support(config.eks.kubernetes_version) and not (
        config.eks.extended_support_acknowledged
    )
    expected = ["hpray:eks-extended-support"] if cost_warning else []
    if checkpoint_interval_warning(config, registry.plan_of(config)) is not None:
        expected.append("hpray:checkpoint-interval")
    report = json.loads((out / "validation-report.json").read_text())
    violations = [v for p in report["pluginReports"] for v in p.get("violations", [])]
    seen = [v["ruleName"].removeprefix("Annotation::") for v in violations]
    assert sorted(seen) == sorted(expected), violations
    seen_meta: list[str] = []
    for meta_file in out.glob("*.metadata.json"):
        for path, entries in json.loads(meta_file.read_text()).items():
            bad = [e for e in entries if e["type"] in ("aws:cdk:warning", "aws:cdk:error")]
            for warning in expected:
                seen_meta += [
                    warning for e in bad if e["type"] == "aws:cdk:warning" and e["data"].endswith(f"[ack: {warning}]")
                ]
                bad = [e for e in bad if not e["data"].endswith(f"[ack: {warning}]")]
            assert bad == [], f"{meta_file.name} {path}: {bad}"
    assert sorted(seen_meta) == sorted(expected)


def test_compliance_plugins_fail_synth_on_a_violation():
    """The gate is live: a violating construct in a platform stack stops synth."""
    from aws_cdk import aws_s3 as s3

    from tests.conftest import make_app

    app, _, stacks = make_app("dev")
    s3.Bucket(stacks.storage, "Unencrypted")
    with pytest.raises(RuntimeError, match="ValidationFailed") as info:
        app.synth()
    assert "AwsSolutions-S1" in str(info.value)
    assert "NIST.800.53.R5-S3BucketLoggingEnabled" in str(info.value)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_cfn_lint_clean(env, synthesized):
    out = assembly_dir(synthesized, env)
    templates = sorted(str(p) for p in out.glob("*.template.json"))
    assert len(templates) >= 2
    proc = subprocess.run([str(VENV_BIN / "cfn-lint"), *templates], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_checkov_clean(env, synthesized):
    out = assembly_dir(synthesized, env)
    proc = subprocess.run(
        checkov_command(out, "--output", "json"),
        capture_output=True,
        text=True,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    results = result if isinstance(result, list) else [result]
    summary = results[0]["summary"]
    assert summary["failed"] == 0 and summary["passed"] > 0
    # Every skip carries a comment.
    for r in results:
        for check in r["results"].get("skipped_checks", []):
            assert check.get("check_result", {}).get("suppress_comment"), check["check_id"]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_no_lookups_and_no_dummy_azs(env, synthesized):
    out = assembly_dir(synthesized, env)
    manifest = json.loads((out / "manifest.json").read_text())
    assert "missing" not in manifest
    for template in out.glob("*.template.json"):
        assert "dummy1" not in template.read_text()


def _synth_with_cli_app(outdir: Path, env: str) -> None:
    """Run app.py the way the CDK CLI does (context and outdir through the environment)."""
    context = json.loads((ROOT / "cdk.json").read_text())["context"] | {"env": env}
    proc = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env={**os.environ, "CDK_OUTDIR": str(outdir), "CDK_CONTEXT_JSON": json.dumps(context)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_synth_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _synth_with_cli_app(a, "prod")
    _synth_with_cli_app(b, "prod")
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b and files_a
    _, mismatch, errors = filecmp.cmpfiles(a, b, [str(f) for f in files_a], shallow=False)
    assert mismatch == [] and errors == []


def test_stacks_split_by_lifecycle(synthesized):
    _, _config, stacks = synthesized("dev")
    names = {s.stack_name for s in (stacks.network, stacks.storage)}
    assert names == {"HprayDevNetwork", "HprayDevStorage"}
    assert stacks.storage.dependencies == [stacks.network]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_resource_is_tagged(env, synthesized):
    _, config, stacks = synthesized(env)
    from tests.conftest import template_of

    template = template_of(stacks.storage).to_json()
    bucket = next(r for r in template["Resources"].values() if r["Type"] == "AWS::S3::Bucket")
    tags = {t["Key"]: t["Value"] for t in bucket["Properties"]["Tags"]}
    assert tags == config.tags.as_dict() | tags and set(config.tags.as_dict()) <= set(tags)


def test_prod_checkpoint_interval_warning_is_on_the_file_system(synthesized):
    """A production interval far from the Young/Daly optimum is a synth warning on FSx (the
    sizing's text, sizing/goodput.py), not an error."""
    from sizing.plan import checkpoint_interval_warning

    assembly, config, stacks = synthesized("prod")
    warning = checkpoint_interval_warning(config, registry.plan_of(config))
    assert warning is not None and "9.9x shorter than the Young/Daly optimum" in warning
    meta = json.loads((Path(assembly.directory) / f"{stacks.storage.artifact_id}.metadata.json").read_text())
    found = {path: e["data"] for path, entries in meta.items() for e in entries if e["type"] == "aws:cdk:warning"}
    assert found == {f"/{stacks.storage.artifact_id}/Lustre": f"{warning} [ack: hpray:checkpoint-interval]"}
