"""Metrics, log and alarm wiring of constructs/observability.py, asserted on every environment's
synthesized templates; the scrape configuration and the alerting rules are checked by the real
Prometheus tools (``promtool``, Debian package ``prometheus``)."""

from __future__ import annotations

import base64
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from constructs import observability as co

from config import load_environment
from config import observability as obs
from config.facts.names import KUBERAY_NAMESPACE
from config.observability import Observability
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
    assert blob == co.scrape_configuration(config.observability, cluster_name=config.eks_cluster_name)
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
def test_the_alarm_publishers_key_statement_is_awss_own(env, synthesized):
    """AMP's and EventBridge's use of the topic's key is granted as AWS's examples grant it, with
    no condition that their publish might not carry (a missing one drops every alert silently);
    the account guard is on the topic's policy."""
    _, _, stacks = synthesized(env)
    [statement] = [
        s
        for key in template_of(stacks.storage).find_resources("AWS::KMS::Key").values()
        for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Sid") == "AllowAlarmPublishers"
    ]
    assert statement == {
        "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
        "Effect": "Allow",
        "Principal": {"Service": ["aps.amazonaws.com", "events.amazonaws.com"]},
        "Resource": "*",
        "Sid": "AllowAlarmPublishers",
    }
    topic_policy = template_of(stacks.cluster).find_resources("AWS::SNS::TopicPolicy")
    publishers = [
        s
        for p in topic_policy.values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Sid") in ("PublishAps", "PublishEvents")
    ]
    assert len(publishers) == 2
    assert all("aws:SourceAccount" in s["Condition"]["StringEquals"] for s in publishers)


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
    assert alerts == {
        "RayJobFailed",
        "RayServiceNotReady",
        "Serve5xxRate",
        "TrainingGoodputLow",
        "RayMetricsTargetDown",
    }
    _, rule = _only(t.find_resources("AWS::Events::Rule"))
    assert rule["Properties"]["EventPattern"] == co.hyperpod_event_pattern(config.hyperpod_cluster_name)
    assert rule["Properties"]["Targets"][0]["Arn"] == {"Ref": topic_id}


@pytest.mark.parametrize("env", ENVS)
def test_promtool_accepts_the_scrape_config_and_the_rules(env, tmp_path):
    """Debian's Prometheus is built without Kubernetes service discovery (promtool rejects
    ``kubernetes_sd_configs`` as an unknown field), so each job's discovery is swapped for a static
    target: promtool still parses the globals, every relabel rule and its regex."""
    config = load_environment(env)
    scrape = co.scrape_configuration(config.observability, cluster_name=config.eks_cluster_name)
    for job in scrape["scrape_configs"]:
        assert job.pop("kubernetes_sd_configs")[0]["role"] == "pod"
        job["static_configs"] = [{"targets": ["127.0.0.1:9"]}]
    assert PROMTOOL, "promtool missing: `make test` installs it (Debian package prometheus, Makefile APT_PACKAGES)"
    (tmp_path / "scrape.yml").write_text(co.yaml_text(scrape))
    (tmp_path / "rules.yml").write_text(co.yaml_text(co.alerting_rules(config.observability)))
    for args in (["check", "config", "--syntax-only", "scrape.yml"], ["check", "rules", "rules.yml"]):
        proc = subprocess.run([PROMTOOL, *args], cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 5 rules found" in proc.stdout


def test_alerts_use_series_that_rays_own_dashboards_plot():
    """The Serve alert's series names come from the pinned Ray's Serve dashboard; a rename in Ray
    fails here, not silently in production."""
    from rigs.prom_rehearsal import dashboards

    plotted = {m for exprs in dashboards().values() for _, e in exprs for m in re.findall(r"\bray_[a-z0-9_]+", e)}
    rules = co.alerting_rules(load_environment("dev").observability)
    used = {m for g in rules["groups"] for r in g["rules"] for m in re.findall(r"\bray_[a-z0-9_]+", r["expr"])}
    used -= {obs.TRAIN_GOODPUT_RUN_LABEL}  # a label (Ray Train's run name), not a series
    assert used == {
        "ray_serve_num_http_error_requests_total",
        "ray_serve_num_http_requests_total",
        obs.prometheus_name(obs.TRAIN_GOODPUT_SECONDS),
    }
    assert used <= plotted


def _goodput_series(run: str, per_minute: dict[str, list[float]]) -> list[dict[str, str]]:
    """promtool input series: the job's cumulative goodput gauge per bucket, one value a minute."""
    out = []
    for bucket in obs.TRAIN_GOODPUT_BUCKETS:
        total, values = 0.0, []
        for gained in per_minute.get(bucket, [0.0] * 121):
            total += gained
            values.append(f"{total:g}")
        series = f'{obs.prometheus_name(obs.TRAIN_GOODPUT_SECONDS)}{{ray_train_run_name="{run}",bucket="{bucket}"}}'
        out.append({"series": series, "values": " ".join(values)})
    return out


@pytest.mark.parametrize("env", ENVS)
def test_promtool_goodput_alert_fires_for_a_failing_run_and_not_for_a_steady_one(env, tmp_path):
    """Two runs scraped every minute for two hours. "steady": 54 productive seconds a minute, 6
    other (goodput 0.9). "failing": the same for an hour, then a node loss: the last 10 minutes'
    steps move from productive to redone, and the run waits for a node for the rest of the hour.
    The alert fires for "failing" only, and only once its hour's goodput has stayed low for the
    rule's ``for``; at 60 minutes nothing fires."""
    config = load_environment(env)
    rules = co.alerting_rules(config.observability)
    [rule] = [r for g in rules["groups"] for r in g["rules"] if r["alert"] == "TrainingGoodputLow"]
    assert config.observability.training_goodput_min < 0.9
    minutes = 121
    steady = {"productive": [0.0] + [54.0] * (minutes - 1), "other": [0.0] + [6.0] * (minutes - 1)}
    failing = {
        "productive": [0.0] + [54.0] * 60 + [-540.0] + [0.0] * (minutes - 62),
        "redone": [0.0] * 61 + [540.0] + [0.0] * (minutes - 62),
        "other": [0.0] + [6.0] * 60 + [0.0] * (minutes - 61),
        "waiting": [0.0] * 61 + [60.0] * (minutes - 61),
    }
    (tmp_path / "rules.yml").write_text(co.yaml_text(rules))
    labels = {"severity": "warning", "ray_train_run_name": "failing"}
    summary = rule["annotations"]["summary"].replace("{{ $labels.ray_train_run_name }}", "failing")
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": _goodput_series("steady", steady) + _goodput_series("failing", failing),
                "alert_rule_test": [
                    {"eval_time": "60m", "alertname": "TrainingGoodputLow", "exp_alerts": []},
                    {
                        "eval_time": "120m",
                        "alertname": "TrainingGoodputLow",
                        "exp_alerts": [{"exp_labels": labels, "exp_annotations": {"summary": summary}}],
                    },
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(co.yaml_text(tests))
    assert PROMTOOL, "promtool missing: `make test` installs it (Debian package prometheus, Makefile APT_PACKAGES)"
    proc = subprocess.run([PROMTOOL, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
    # The threshold is the config's: a failing run scored 0 over its last hour at 120 minutes.
    assert rule["expr"].endswith(f" < {config.observability.training_goodput_min:g}")


def test_scraper_rbac_reads_pods_only_for_the_collector_user():
    role, binding = co.scraper_rbac()
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": obs.SCRAPER_USER}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == obs.SCRAPER_CLUSTER_ROLE


# --- alert routing, end to end with the real engines ---------------------------------------------

ALERTMANAGER = shutil.which("prometheus-alertmanager")
PROMETHEUS = shutil.which("prometheus")
FIRING_SERIES = (
    "# TYPE kuberay_job_deployment_status gauge\n"
    'kuberay_job_deployment_status{namespace="ray-workloads",name="train-llm",deployment_status="Failed"} 1\n'
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A tiny HTTP server: ``/metrics`` serves the firing series; a POST is recorded as an SNS API
    call and answered as SNS answers Publish (Query API, XML)."""

    requests: ClassVar[list[tuple[dict[str, str], dict[str, list[str]]]]] = []

    def do_GET(self):
        body = FIRING_SERIES.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        type(self).requests.append((dict(self.headers), form))
        action = form.get("Action", ["?"])[0]
        body = (
            f'<{action}Response xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><{action}Result>'
            "<MessageId>00000000-0000-0000-0000-000000000001</MessageId>"
            f"</{action}Result><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></{action}Response>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_firing_rule_reaches_the_alarm_topic_through_the_real_alertmanager(synthesized, tmp_path):
    """The rules and the alert manager definition exactly as prod's cluster template carries them:
    a real Prometheus (Debian ``prometheus``) scrapes a series that makes ``RayJobFailed`` fire and
    sends the alert to a real Alertmanager (Debian ``prometheus-alertmanager``) running the
    template's configuration. Its SNS receiver is pointed at a local server (``api_url``, with
    test credentials to sign with) and timed to send at once (``group_wait``); the server must
    receive a SigV4-signed SNS Publish to the template's topic carrying the alert."""
    from review.assembly import load_assembly
    from review.engines import render

    assert PROMETHEUS and ALERTMANAGER, "`make test` installs prometheus and prometheus-alertmanager (APT_PACKAGES)"
    assembly, config, stacks = synthesized("prod")
    [stack] = [s for s in load_assembly(assembly.directory).stacks if s.display_name == stacks.cluster.stack_name]
    resources = stack.template["Resources"]
    [workspace] = [r for r in resources.values() if r["Type"] == "AWS::APS::Workspace"]
    [rules] = [r for r in resources.values() if r["Type"] == "AWS::APS::RuleGroupsNamespace"]
    [topic_id] = [lid for lid, r in resources.items() if r["Type"] == "AWS::SNS::Topic"]
    topic_arn = render({"Ref": topic_id}, stack)
    definition = yaml.safe_load(render(workspace["Properties"]["AlertManagerDefinition"], stack))
    am_config = yaml.safe_load(definition["alertmanager_config"])
    [sns_config] = am_config["receivers"][0]["sns_configs"]
    assert sns_config["topic_arn"] == topic_arn and sns_config["sigv4"] == {"region": config.region}

    _Recorder.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    local = f"127.0.0.1:{server.server_address[1]}"
    # Test-only changes: where SNS is, credentials to sign with, and no waiting to group alerts.
    sns_config["api_url"] = f"http://{local}"
    sns_config["sigv4"].update(access_key="AKIDEXAMPLE", secret_key="test-secret")
    am_config["route"].update(group_wait="1s", group_interval="1s")
    (tmp_path / "alertmanager.yml").write_text(co.yaml_text(am_config))
    (tmp_path / "rules.yml").write_text(rules["Properties"]["Data"])
    am_port, prom_port = _free_port(), _free_port()
    (tmp_path / "prometheus.yml").write_text(
        co.yaml_text(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": ["rules.yml"],
                "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
                "scrape_configs": [{"job_name": co.OPERATOR_JOB, "static_configs": [{"targets": [local]}]}],
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    commands = [
        [
            ALERTMANAGER,
            f"--config.file={tmp_path / 'alertmanager.yml'}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address=",
        ],
        [
            PROMETHEUS,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
    ]
    logs = [open(tmp_path / f"{Path(c[0]).name}.log", "wb") for c in commands]  # noqa: SIM115 (written while running)
    procs = [
        subprocess.Popen(c, stdout=log, stderr=log, cwd=tmp_path, env=env)
        for c, log in zip(commands, logs, strict=True)
    ]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(f.get("Action") == ["Publish"] for _, f in _Recorder.requests):
            assert all(p.poll() is None for p in procs), "a server exited; see its log under " + str(tmp_path)
            time.sleep(0.5)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
        server.shutdown()
        server.server_close()
    publishes = [(h, f) for h, f in _Recorder.requests if f.get("Action") == ["Publish"]]
    assert publishes, "no SNS Publish within 60 s; logs: " + " | ".join(
        (tmp_path / f"{Path(c[0]).name}.log").read_text()[-800:] for c in commands
    )
    headers, form = publishes[0]
    assert form["TopicArn"] == [topic_arn]
    assert "RayJobFailed" in form["Message"][0]
    auth = headers["Authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert f"/{config.region}/sns/aws4_request" in auth
    # The configured message attribute reaches SNS too.
    attrs = {
        form[k][0]: form[k.replace(".Name", ".Value.StringValue")][0]
        for k in form
        if k.startswith("MessageAttributes.entry.") and k.endswith(".Name")
    }
    assert attrs == {"source": "amp"}


# --- every alert's window holds its samples at every allowed scrape interval ---------------------


def _windows(expr: str) -> list[int]:
    return [obs.seconds_of(w) for w in re.findall(r"\[(\d+[smh])\]", expr)]


@pytest.mark.parametrize("interval", [obs.MIN_SCRAPE_INTERVAL_SECONDS, 60, 90, 300])
def test_each_rule_window_holds_four_scrapes_at_the_configured_interval(interval):
    config = load_environment("dev").observability.model_copy(update={"scrape_interval_seconds": interval})
    rules = [r for g in co.alerting_rules(config)["groups"] for r in g["rules"]]
    windows = {r["alert"]: _windows(r["expr"]) for r in rules}
    assert windows["Serve5xxRate"] and windows["TrainingGoodputLow"]
    for alert, seconds in windows.items():
        assert all(w >= obs.SAMPLES_PER_RATE_WINDOW * interval for w in seconds), (alert, seconds, interval)
    # The default interval keeps the five-minute window (the deployed rules do not change).
    if interval == obs.MIN_SCRAPE_INTERVAL_SECONDS:
        assert windows["Serve5xxRate"] == [300, 300]


def test_serve_5xx_alert_fires_at_the_slowest_allowed_scrape_interval(tmp_path):
    """Scraped every 300 s (the most the config allows), an application answering 20 % 5xx for
    an hour: the alert fires (with a five-minute window, rate() found one sample and never did);
    a healthy one does not."""
    slowest = Observability.model_fields["scrape_interval_seconds"].metadata
    top = max(m.le for m in slowest if getattr(m, "le", None) is not None)
    config = load_environment("dev").observability.model_copy(update={"scrape_interval_seconds": top})
    rules = co.alerting_rules(config)
    [rule] = [r for g in rules["groups"] for r in g["rules"] if r["alert"] == "Serve5xxRate"]
    steps = 13  # an hour at one sample every 300 s

    def counter(per_scrape: int) -> str:
        return " ".join(str(per_scrape * i) for i in range(steps))

    series = [
        {"series": 'ray_serve_num_http_requests_total{application="bad"}', "values": counter(100)},
        {
            "series": 'ray_serve_num_http_error_requests_total{application="bad",error_code="500"}',
            "values": counter(20),
        },
        {"series": 'ray_serve_num_http_requests_total{application="good"}', "values": counter(100)},
        {
            "series": 'ray_serve_num_http_error_requests_total{application="good",error_code="500"}',
            "values": counter(0),
        },
    ]
    (tmp_path / "rules.yml").write_text(co.yaml_text(rules))
    summary = rule["annotations"]["summary"].replace("{{ $labels.application }}", "bad")
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": f"{top}s",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "60m",
                        "alertname": "Serve5xxRate",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "application": "bad"},
                                "exp_annotations": {"summary": summary},
                            }
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(co.yaml_text(tests))
    assert PROMTOOL, "promtool missing: `make test` installs it (Debian package prometheus, Makefile APT_PACKAGES)"
    proc = subprocess.run([PROMTOOL, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
