"""Metrics, log and alarm wiring of constructs/observability.py, asserted on every environment's
synthesized templates; the scrape configuration and the alerting rules are checked by the real
Prometheus tools (``promtool``, Debian package ``prometheus``)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess

import pytest
import yaml
from constructs import observability as co

from config import load_environment
from config import observability as obs
from config.names import KUBERAY_NAMESPACE
from tests.conftest import template_of

ENVS = ["dev", "staging", "prod"]
PROMTOOL = shutil.which("promtool")


def _only(resources: dict) -> tuple[str, dict]:
    assert len(resources) == 1, list(resources)
    return next(iter(resources.items()))


def _platform_key_import(value) -> bool:
    """A reference to the storage stack's platform key (cross-stack: Fn::ImportValue)."""
    return "PlatformKey" in json.dumps(value)


@pytest.mark.parametrize("env", ENVS)
def test_scraper_sends_ray_and_operator_metrics_to_the_workspace(env, synthesized):
    _, config, stacks = synthesized(env)
    t = template_of(stacks.cluster)
    ws_id, ws = _only(t.find_resources("AWS::APS::Workspace"))
    # AWS owned key on purpose: a workspace with a customer managed key takes no managed collector.
    assert "KmsKeyArn" not in ws["Properties"]
    _, scraper = _only(t.find_resources("AWS::APS::Scraper"))
    p = scraper["Properties"]
    assert p["Destination"] == {"AmpConfiguration": {"WorkspaceArn": {"Fn::GetAtt": [ws_id, "Arn"]}}}
    eks_source = p["Source"]["EksConfiguration"]
    cluster_id = _only(t.find_resources("AWS::EKS::Cluster"))[0]
    assert eks_source["ClusterArn"] == {"Fn::GetAtt": [cluster_id, "Arn"]}
    # AMP needs subnets in two AZs at least; the private subnets of the VPC, one per AZ.
    assert len(eks_source["SubnetIds"]) == len(config.network.availability_zones) >= 2
    sg_id = eks_source["SecurityGroupIds"][0]["Fn::GetAtt"][0]
    assert (
        t.find_resources("AWS::EC2::SecurityGroup")[sg_id]["Properties"]["SecurityGroupEgress"][0]["CidrIp"]
        == "255.255.255.255/32"
    )  # CDK's "no outbound" placeholder: only the explicit egress rules below
    blob = json.loads(base64.b64decode(p["ScrapeConfiguration"]["ConfigurationBlob"]))
    assert blob == co.scrape_configuration(config)
    jobs = {j["job_name"]: j for j in blob["scrape_configs"]}
    assert set(jobs) == {"ray", "kuberay-operator"}
    assert blob["global"]["scrape_interval"] == f"{config.observability.scrape_interval_seconds}s"
    keep = {
        name: {r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"} for name, job in jobs.items()
    }
    assert keep["ray"] == {"head|worker", obs.RAY_METRICS_PORT_NAME}
    assert keep["kuberay-operator"] == {"kuberay-operator", obs.OPERATOR_METRICS_PORT_NAME}
    assert jobs["kuberay-operator"]["kubernetes_sd_configs"][0]["namespaces"] == {"names": [KUBERAY_NAMESPACE]}


@pytest.mark.parametrize("env", ENVS)
def test_scraper_egress_is_the_metrics_ports_and_the_api_only(env, synthesized):
    _, _, stacks = synthesized(env)
    t = template_of(stacks.cluster)
    egress = [
        (r["Properties"]["IpProtocol"], r["Properties"]["FromPort"], r["Properties"]["ToPort"])
        for lid, r in t.find_resources("AWS::EC2::SecurityGroupEgress").items()
        if lid.startswith("ObservabilityScraperTo")
    ]
    assert sorted(egress) == [("tcp", 443, 443), ("tcp", 8080, 8080), ("tcp", 8080, 8080)]


@pytest.mark.parametrize("env", ENVS)
def test_container_log_groups_precede_the_addon_with_key_and_retention(env, synthesized):
    _, config, stacks = synthesized(env)
    t = template_of(stacks.cluster)
    groups = t.find_resources("AWS::Logs::LogGroup")
    by_name = {
        g["Properties"]["LogGroupName"]: (lid, g) for lid, g in groups.items() if "LogGroupName" in g["Properties"]
    }
    expected = [obs.container_log_group(config.eks_cluster_name, k) for k in obs.CONTAINER_LOG_KINDS]
    assert set(expected) <= set(by_name)
    addon_id, addon = next(
        (lid, a)
        for lid, a in t.find_resources("AWS::EKS::Addon").items()
        if a["Properties"]["AddonName"] == "amazon-cloudwatch-observability"
    )
    for name in expected:
        lid, g = by_name[name]
        assert g["Properties"]["RetentionInDays"] == config.observability.log_retention_days
        assert _platform_key_import(g["Properties"]["KmsKeyId"])
        assert g["DeletionPolicy"] == ("Retain" if config.production else "Delete")
        assert lid in addon["DependsOn"], f"{addon_id} must wait for {name}"
    # The key policy lets CloudWatch Logs use the key for these groups only.
    key_policy = json.dumps(template_of(stacks.storage).find_resources("AWS::KMS::Key"))
    assert f"log-group:{obs.container_log_group_prefix(config.eks_cluster_name)}*" in key_policy


@pytest.mark.parametrize("env", ENVS)
def test_alarms_reach_one_encrypted_topic(env, synthesized):
    _, config, stacks = synthesized(env)
    t = template_of(stacks.cluster)
    topic_id, topic = _only(t.find_resources("AWS::SNS::Topic"))
    assert _platform_key_import(topic["Properties"]["KmsMasterKeyId"])
    subs = t.find_resources("AWS::SNS::Subscription")
    assert all(s["Properties"]["TopicArn"] == {"Ref": topic_id} for s in subs.values())
    assert sorted((s["Properties"]["Protocol"], s["Properties"]["Endpoint"]) for s in subs.values()) == sorted(
        [("email", e) for e in config.observability.alarm_emails]
        + [("https", u) for u in config.observability.alarm_https_endpoints]
    )
    if config.production:  # a production config without a subscriber does not load (tests/config)
        assert subs
    _, ws = _only(t.find_resources("AWS::APS::Workspace"))
    definition = ws["Properties"]["AlertManagerDefinition"]["Fn::Join"]
    assert {"Ref": topic_id} in definition[1]
    # AMP takes the Alertmanager configuration as one string under alertmanager_config (a literal
    # block), not as a mapping.
    text = "".join(p if isinstance(p, str) else "TOPIC-ARN" for p in definition[1])
    wrapper = yaml.safe_load(text)
    assert list(wrapper) == ["alertmanager_config"] and isinstance(wrapper["alertmanager_config"], str)
    assert text.startswith("alertmanager_config: |\n")
    inner = yaml.safe_load(wrapper["alertmanager_config"])
    assert inner == co.alertmanager_config("TOPIC-ARN", config.region)
    _, rules = _only(t.find_resources("AWS::APS::RuleGroupsNamespace"))
    alerts = {r["alert"] for g in json.loads(rules["Properties"]["Data"])["groups"] for r in g["rules"]}
    assert alerts == {"RayJobFailed", "RayServiceNotReady", "Serve5xxRate", "RayMetricsTargetDown"}
    _, rule = _only(t.find_resources("AWS::Events::Rule"))
    assert rule["Properties"]["EventPattern"] == co.hyperpod_event_pattern(config)
    assert rule["Properties"]["Targets"][0]["Arn"] == {"Ref": topic_id}


@pytest.mark.parametrize("env", ENVS)
def test_promtool_accepts_the_scrape_config_and_the_rules(env, tmp_path):
    """Debian's Prometheus is built without Kubernetes service discovery (promtool rejects
    ``kubernetes_sd_configs`` as an unknown field), so each job's discovery is swapped for a static
    target: promtool still parses the globals, every relabel rule and its regex."""
    config = load_environment(env)
    scrape = co.scrape_configuration(config)
    for job in scrape["scrape_configs"]:
        assert job.pop("kubernetes_sd_configs")[0]["role"] == "pod"
        job["static_configs"] = [{"targets": ["127.0.0.1:9"]}]
    assert PROMTOOL, "promtool missing: `make test` installs it (Debian package prometheus, Makefile APT_PACKAGES)"
    (tmp_path / "scrape.yml").write_text(co.yaml_text(scrape))
    (tmp_path / "rules.yml").write_text(co.yaml_text(co.alerting_rules(config)))
    for args in (["check", "config", "--syntax-only", "scrape.yml"], ["check", "rules", "rules.yml"]):
        proc = subprocess.run([PROMTOOL, *args], cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 4 rules found" in proc.stdout


def test_alerts_use_series_that_rays_own_dashboards_plot():
    """The Serve alert's series names come from the pinned Ray's Serve dashboard; a rename in Ray
    fails here, not silently in production."""
    from workloads.common.prom_rehearsal import dashboards

    plotted = {m for exprs in dashboards().values() for _, e in exprs for m in re.findall(r"\bray_[a-z0-9_]+", e)}
    rules = co.alerting_rules(load_environment("dev"))
    used = {m for g in rules["groups"] for r in g["rules"] for m in re.findall(r"\bray_[a-z0-9_]+", r["expr"])}
    assert used == {"ray_serve_num_http_error_requests_total", "ray_serve_num_http_requests_total"}
    assert used <= plotted


def test_scraper_rbac_reads_pods_only_for_the_collector_user():
    role, binding = co.scraper_rbac()
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": obs.SCRAPER_USER}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == obs.SCRAPER_CLUSTER_ROLE
