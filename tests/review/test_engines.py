"""review/engines.py: every document a template carries, checked by the real engine (amtool from
Debian's prometheus-alertmanager, promtool from prometheus) and AMP's own rules, read back from
the synthesized templates; a rejected one fails the review, so `make synth` and `make pipeline`."""

from __future__ import annotations

import base64
import json
import shutil

import pytest
from constructs import observability as co

from config import load_environment
from review import engines as e
from review.__main__ import main as review_main
from review.assembly import load_assembly

ENVIRONMENTS = ["dev", "staging", "prod"]
TOPIC = "arn:aws:sns:us-east-1:111111111111:alarms"


@pytest.fixture(autouse=True)
def _engines_installed():
    for tool in (e.AMTOOL, e.PROMTOOL):
        assert shutil.which(tool), f"{tool} missing: `make test` installs it (Makefile APT_PACKAGES)"


def _dev_copy(synthesized, tmp_path):
    assembly, _, _ = synthesized("dev")
    copy = tmp_path / "cdk.out"
    shutil.copytree(assembly.directory, copy)
    template = next(copy.glob("*Cluster.template.json"))
    return copy, template, json.loads(template.read_text())


def _only(data: dict, rtype: str) -> tuple[str, dict]:
    [(lid, r)] = [(lid, r) for lid, r in data["Resources"].items() if r["Type"] == rtype]
    return lid, r


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_environments_documents_pass_their_engines(env, synthesized):
    assembly, _, _ = synthesized(env)
    results = e.check_documents(load_assembly(assembly.directory).stacks)
    assert sorted((r.document, r.ok) for r in results) == [
        ("AlertManagerDefinition", True),
        ("Data", True),
        ("ScrapeConfiguration", True),
    ], [r.message for r in results]
    verdicts = {r.document: r.message for r in results}
    assert verdicts["AlertManagerDefinition"].startswith("SUCCESS")
    assert "1 receivers" in verdicts["AlertManagerDefinition"]
    assert verdicts["Data"] == "SUCCESS: 5 rules found"  # the 5 alerts (tests/constructs/test_observability.py)
    assert verdicts["ScrapeConfiguration"] == "SUCCESS: scrape.yml is valid prometheus config file syntax"


def test_the_old_mapping_form_fails_the_review_naming_the_workspace(synthesized, tmp_path, capsys):
    """The definition as it was built before: ``alertmanager_config`` a mapping, which AMP rejects
    (the workspace, and with it the cluster stack, fails to create)."""
    copy, template, data = _dev_copy(synthesized, tmp_path)
    lid, workspace = _only(data, "AWS::APS::Workspace")
    topic_id, _ = _only(data, "AWS::SNS::Topic")
    mapping_form = co.yaml_text({"alertmanager_config": co.alertmanager_config("TOPIC", "us-east-1")})
    before, after = mapping_form.split("TOPIC")
    workspace["Properties"]["AlertManagerDefinition"] = {"Fn::Join": ["", [before, {"Ref": topic_id}, after]]}
    template.write_text(json.dumps(data))
    assert review_main([str(copy), "--no-diagram"]) == 5
    stack = template.name.removesuffix(".template.json")
    assert [line for line in capsys.readouterr().err.splitlines() if "rejected" in line] == [
        f"review: dev: {stack}/{lid} AlertManagerDefinition rejected by AMP definition + amtool check-config: "
        "alertmanager_config is a mapping; AMP takes the whole Alertmanager configuration as one string "
        "(alertmanager_config: |)"
    ]
    report = (copy / "review" / "dev.md").read_text()
    assert "## Documents checked by their engines" in report and "rejected: 1" in report


def test_amtool_rejects_what_alertmanager_would(tmp_path):
    config = co.alertmanager_config(TOPIC, "us-east-1")
    config["route"]["receiver"] = "pager"
    definition = "alertmanager_config: |\n" + "".join(f"  {x}\n" for x in co.yaml_text(config).splitlines())
    assert e.check_alert_manager_definition(definition) == (False, 'FAILED: undefined receiver "pager" used in route')
    # Templates named by the configuration are read from template_files, as AMP does.
    config = {**co.alertmanager_config(TOPIC, "us-east-1"), "templates": ["sns.tmpl"]}
    body = "".join(f"  {x}\n" for x in co.yaml_text(config).splitlines())
    good = '{{ define "x" }}ok{{ end }}'
    assert e.check_alert_manager_definition(f"template_files:\n  sns.tmpl: '{good}'\nalertmanager_config: |\n{body}")[0]
    ok, message = e.check_alert_manager_definition(
        "template_files:\n  sns.tmpl: '{{ define \"x\" }}'\nalertmanager_config: |\n" + body
    )
    assert not ok and "sns.tmpl" in message and "unexpected EOF" in message


def test_amp_wrapper_is_checked_before_amtool():
    assert e.check_alert_manager_definition("route: {}\n") == (
        False,
        "unknown key(s) route; AMP allows alertmanager_config, template_files",
    )
    assert e.check_alert_manager_definition("template_files: {}\n")[1].startswith("alertmanager_config is missing")


def test_a_bad_rule_is_reported_with_promtools_message(synthesized, tmp_path, capsys):
    copy, template, data = _dev_copy(synthesized, tmp_path)
    lid, rules = _only(data, "AWS::APS::RuleGroupsNamespace")
    doc = json.loads(rules["Properties"]["Data"])
    doc["groups"][0]["rules"][0]["expr"] = "max by (namespace (kuberay_job_deployment_status)"
    rules["Properties"]["Data"] = co.yaml_text(doc)
    template.write_text(json.dumps(data))
    assert review_main([str(copy), "--no-diagram"]) == 5
    [line] = [x for x in capsys.readouterr().err.splitlines() if "rejected" in x]
    stack = template.name.removesuffix(".template.json")
    assert line.startswith(f"review: dev: {stack}/{lid} Data rejected by promtool check rules: FAILED: rules.yml:")
    assert 'group "ray-platform", rule 1, "RayJobFailed": could not parse expression' in line


def test_a_scrape_interval_under_30s_is_reported(synthesized, tmp_path, capsys):
    copy, template, data = _dev_copy(synthesized, tmp_path)
    lid, scraper = _only(data, "AWS::APS::Scraper")
    blob = scraper["Properties"]["ScrapeConfiguration"]
    config = json.loads(base64.b64decode(blob["ConfigurationBlob"]))
    config["global"]["scrape_interval"] = "10s"
    blob["ConfigurationBlob"] = base64.b64encode(json.dumps(config).encode()).decode()
    template.write_text(json.dumps(data))
    assert review_main([str(copy), "--no-diagram"]) == 5
    stack = template.name.removesuffix(".template.json")
    assert [x for x in capsys.readouterr().err.splitlines() if "rejected" in x] == [
        f"review: dev: {stack}/{lid} ScrapeConfiguration rejected by AMP collector limits + promtool check config: "
        "global.scrape_interval: 10s is below the managed collector's minimum of 30s"
    ]


def test_collector_limits_and_promtool_on_the_scrape_configuration():
    dev = load_environment("dev")
    config = co.scrape_configuration(dev.observability, cluster_name=dev.eks_cluster_name)
    config["scrape_configs"][0]["scrape_interval"] = "15s"
    config["scrape_configs"][1]["file_sd_configs"] = [{"files": ["x.json"]}]
    config["remote_write"] = [{"url": "https://example.com"}]
    ok, message = e.check_scrape_configuration(co.yaml_text(config))
    assert (ok, message) == (
        False,
        "remote_write: not supported by the managed collector; allowed: global, scrape_configs; "
        "scrape_configs[0] (ray).scrape_interval: 15s is below the managed collector's minimum of 30s; "
        "scrape_configs[1] (kuberay-operator).file_sd_configs: not supported by the managed collector",
    )
    # Within the collector's limits, promtool still parses every relabel rule.
    config = co.scrape_configuration(dev.observability, cluster_name=dev.eks_cluster_name)
    config["scrape_configs"][0]["relabel_configs"][0]["regex"] = "head|(worker"
    ok, message = e.check_scrape_configuration(co.yaml_text(config))
    assert not ok and message.startswith("FAILED: parsing YAML file scrape.yml:") and "missing closing )" in message
    assert e.duration_seconds("1m30s") == 90 and e.duration_seconds("30") is None


def test_a_missing_engine_is_one_line(monkeypatch, synthesized, tmp_path, capsys):
    copy, _, _ = _dev_copy(synthesized, tmp_path)
    monkeypatch.setattr(e.shutil, "which", lambda name: None)
    assert review_main([str(copy), "--no-diagram"]) == 2
    # The alerting rules come first (logical IDs in order): promtool is the first engine asked for.
    assert capsys.readouterr().err.strip() == (
        "review: promtool is not installed (Debian package prometheus; `make deps-synth` installs it)"
    )
    with pytest.raises(e.ToolMissing, match=r"^amtool is not installed \(Debian package prometheus-alertmanager;"):
        e.check_alert_manager_definition(co.alert_manager_definition(TOPIC, "us-east-1"))
