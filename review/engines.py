"""Every document a template carries, checked by the engine that reads it.

CloudFormation's schema sees these documents as opaque strings; the services parse them only at
deploy time, where a rejected document rolls the whole stack back. Read back from the synthesized
templates (so what is checked is what deploys):

- ``AWS::APS::Workspace`` ``AlertManagerDefinition``: AMP's wrapper (API reference,
  "AlertManagerDefinitionData YAML structure": ``alertmanager_config`` holds the whole Alertmanager
  configuration as one string, ``template_files`` maps file names to template text), then the inner
  configuration with ``amtool check-config`` (Debian package ``prometheus-alertmanager``), the
  template files beside it.
- ``AWS::APS::RuleGroupsNamespace`` ``Data``: ``promtool check rules``.
- ``AWS::APS::Scraper`` ``ScrapeConfiguration.ConfigurationBlob`` (base64): the managed collector's
  limits (:func:`collector_problems`), then ``promtool check config --syntax-only``.

A reference to another resource (the alarm topic's ARN) is rendered as a value of the form that
resource's reference takes, so the engines see a well-formed document.
"""

from __future__ import annotations

import base64
import binascii
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from config.observability import MIN_SCRAPE_INTERVAL_SECONDS
from review.assembly import Stack

AMTOOL = "amtool"
PROMTOOL = "promtool"
ENGINE_TIMEOUT_S = 60

# AMP managed collector limits (Amazon CloudWatch user guide, "Scraper configuration",
# Limitations; the same collector as AMP's): scrape interval at least 30 s, no file-based or
# external service discovery, no remote write or read (the collector writes to its workspace),
# configuration at most 256 KB. Rules and alerting belong to the workspace, not the collector.
MIN_SCRAPE_INTERVAL_S = MIN_SCRAPE_INTERVAL_SECONDS
MAX_COLLECTOR_CONFIG_BYTES = 256 * 1024
COLLECTOR_TOP_LEVEL = ("global", "scrape_configs")
UNSUPPORTED_SD = ("file_sd_configs", "consul_sd_configs", "eureka_sd_configs")
KUBERNETES_SD_ROLES = ("node", "service", "pod", "endpoints", "endpointslice", "ingress")
# AMP's definition: these keys and nothing else.
AMP_DEFINITION_KEYS = ("alertmanager_config", "template_files")

_DURATION_RE = re.compile(r"^((\d+)y)?((\d+)w)?((\d+)d)?((\d+)h)?((\d+)m)?((\d+)s)?((\d+)ms)?$")
_DURATION_UNITS_S = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)


@dataclass(frozen=True)
class DocumentCheck:
    stack: str
    logical_id: str
    document: str  # e.g. "AlertManagerDefinition"
    engine: str  # e.g. "amtool check-config"
    ok: bool
    message: str  # the engine's verdict, one line

    @property
    def resource(self) -> str:
        return f"{self.stack}/{self.logical_id}"


class ToolMissing(Exception):
    """An engine is not installed."""


# ---------------------------------------------------------------------------------------------
# Rendering template values into the text the service reads
# ---------------------------------------------------------------------------------------------


def render(value: Any, stack: Stack) -> str:
    """A template string value (literal, ``Fn::Join``, ``Fn::Sub``, ``Ref``, ``Fn::GetAtt``) as text;
    references become values of the form the referenced resource's reference takes."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Fn::Join":
            sep, parts = arg
            return str(sep).join(render(p, stack) for p in parts)
        if fn == "Ref":
            return _ref(str(arg), stack)
        if fn == "Fn::GetAtt":
            lid, attr = arg if isinstance(arg, list) else str(arg).split(".", 1)
            return f"{lid}.{attr}"
        if fn == "Fn::ImportValue":
            return "imported-value"
        if fn == "Fn::Sub":
            text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
            return re.sub(
                r"\$\{([^}!]+)\}",
                lambda m: render(variables[m.group(1)], stack) if m.group(1) in variables else _ref(m.group(1), stack),
                text,
            )
    raise ValueError(f"cannot render {value!r} as text")


def _ref(name: str, stack: Stack) -> str:
    pseudo = {
        "AWS::Region": stack.region,
        "AWS::AccountId": stack.account,
        "AWS::Partition": "aws",
        "AWS::URLSuffix": "amazonaws.com",
        "AWS::StackName": stack.display_name,
    }
    if name in pseudo:
        return pseudo[name]
    resource = (stack.template.get("Resources") or {}).get(name) or {}
    if resource.get("Type") == "AWS::SNS::Topic":  # Ref of a topic is its ARN
        return f"arn:aws:sns:{stack.region}:{stack.account}:{name}"
    return name


# ---------------------------------------------------------------------------------------------
# The engines
# ---------------------------------------------------------------------------------------------


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        package = "prometheus-alertmanager" if name == AMTOOL else "prometheus"
        raise ToolMissing(f"{name} is not installed (Debian package {package}; `make deps-synth` installs it)")
    return path


def _one_line(output: str, directory: Path) -> str:
    """The engine's message on one line: its own lines joined, the temporary paths dropped."""
    lines = []
    for line in output.replace(str(directory) + "/", "").splitlines():
        line = re.sub(r"^Checking \S+\s*", "", line.strip())
        if line and not line.startswith("amtool: error: failed to validate"):
            lines.append(line)
    return " ".join(lines)


def _run(argv: list[str], directory: Path) -> tuple[bool, str]:
    proc = subprocess.run(argv, cwd=directory, capture_output=True, text=True, timeout=ENGINE_TIMEOUT_S)
    return proc.returncode == 0, _one_line(proc.stdout + "\n" + proc.stderr, directory)


def check_alert_manager_definition(definition: str) -> tuple[bool, str]:
    """AMP's wrapper, then ``amtool check-config`` on the configuration it holds."""
    try:
        wrapper = yaml.safe_load(definition)
    except yaml.YAMLError as err:
        return False, f"not YAML: {' '.join(str(err).split())}"
    if not isinstance(wrapper, dict):
        return False, "AMP expects a mapping with alertmanager_config (and optionally template_files)"
    extra = sorted(set(wrapper) - set(AMP_DEFINITION_KEYS))
    if extra:
        return False, f"unknown key(s) {', '.join(extra)}; AMP allows {', '.join(AMP_DEFINITION_KEYS)}"
    config = wrapper.get("alertmanager_config")
    if not isinstance(config, str):
        kind = (
            "missing" if config is None else "a mapping" if isinstance(config, dict) else f"a {type(config).__name__}"
        )
        return False, (
            f"alertmanager_config is {kind}; AMP takes the whole Alertmanager configuration as one string "
            "(alertmanager_config: |)"
        )
    templates = wrapper.get("template_files") or {}
    if not isinstance(templates, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and "/" not in k for k, v in templates.items()
    ):
        return False, "template_files must map file names to template text"
    amtool = _tool(AMTOOL)
    with tempfile.TemporaryDirectory(prefix="amtool-") as tmp:
        directory = Path(tmp)
        for name, text in templates.items():
            (directory / name).write_text(text)
        (directory / "alertmanager.yml").write_text(config)
        return _run([amtool, "check-config", "alertmanager.yml"], directory)


def check_rules(data: str) -> tuple[bool, str]:
    promtool = _tool(PROMTOOL)
    with tempfile.TemporaryDirectory(prefix="promtool-") as tmp:
        directory = Path(tmp)
        (directory / "rules.yml").write_text(data)
        return _run([promtool, "check", "rules", "rules.yml"], directory)


def duration_seconds(text: str) -> float | None:
    """A Prometheus duration (``30s``, ``1m30s``) in seconds, or None when it is not one."""
    m = _DURATION_RE.match(text)
    if not text or m is None:
        return None
    return sum(int(m.group(2 * i + 2) or 0) * unit for i, unit in enumerate(_DURATION_UNITS_S))


def collector_problems(document: str) -> list[str]:
    """What AMP's managed collector refuses in a scrape configuration that Prometheus accepts."""
    problems: list[str] = []
    size = len(document.encode())
    if size > MAX_COLLECTOR_CONFIG_BYTES:
        problems.append(f"configuration is {size} bytes; the managed collector allows {MAX_COLLECTOR_CONFIG_BYTES}")
    try:
        config = yaml.safe_load(document)
    except yaml.YAMLError as err:
        return [f"not YAML: {' '.join(str(err).split())}"]
    if not isinstance(config, dict):
        return ["not a mapping of global and scrape_configs"]
    extra = sorted(set(config) - set(COLLECTOR_TOP_LEVEL))
    if extra:
        problems.append(f"{', '.join(extra)}: not supported by the managed collector; allowed: global, scrape_configs")

    def interval(where: str, value: Any) -> None:
        seconds = duration_seconds(str(value))
        if seconds is not None and seconds < MIN_SCRAPE_INTERVAL_S:
            problems.append(
                f"{where}.scrape_interval: {value} is below the managed collector's minimum of {MIN_SCRAPE_INTERVAL_S}s"
            )

    global_ = config.get("global") or {}
    interval("global", global_.get("scrape_interval", "1m"))
    for i, job in enumerate(config.get("scrape_configs") or []):
        where = f"scrape_configs[{i}] ({job.get('job_name')})"
        if "scrape_interval" in job:
            interval(where, job["scrape_interval"])
        for sd in UNSUPPORTED_SD:
            if sd in job:
                problems.append(f"{where}.{sd}: not supported by the managed collector")
        for sd in job.get("kubernetes_sd_configs") or []:
            if sd.get("role") not in KUBERNETES_SD_ROLES:
                problems.append(
                    f"{where}.kubernetes_sd_configs.role: {sd.get('role')!r}; allowed: {', '.join(KUBERNETES_SD_ROLES)}"
                )
            if "api_server" in sd or "kubeconfig_file" in sd:
                problems.append(f"{where}.kubernetes_sd_configs: the collector discovers through its own cluster's API")
    return problems


def check_scrape_configuration(document: str) -> tuple[bool, str]:
    """The collector's limits, then ``promtool check config --syntax-only``. Debian's Prometheus is
    built without Kubernetes service discovery (promtool rejects ``kubernetes_sd_configs`` as an
    unknown field), so each job's Kubernetes discovery (checked above) is replaced with a static
    target for promtool, which still parses the globals, every relabel rule and its regex."""
    problems = collector_problems(document)
    if problems:
        return False, "; ".join(problems)
    config = yaml.safe_load(document)
    for job in config.get("scrape_configs") or []:
        if job.pop("kubernetes_sd_configs", None) is not None:
            job.setdefault("static_configs", []).append({"targets": ["127.0.0.1:9"]})
    promtool = _tool(PROMTOOL)
    with tempfile.TemporaryDirectory(prefix="promtool-") as tmp:
        directory = Path(tmp)
        (directory / "scrape.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        return _run([promtool, "check", "config", "--syntax-only", "scrape.yml"], directory)


def _blob(value: str) -> str:
    try:
        return base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as err:
        raise ValueError(f"ConfigurationBlob is not base64 of UTF-8 text ({err})") from None


# (resource type, property path, document label, engine label, text of the value, check)
CHECKS: tuple[tuple[str, tuple[str, ...], str, str, Callable[[str], str], Callable[[str], tuple[bool, str]]], ...] = (
    (
        "AWS::APS::Workspace",
        ("AlertManagerDefinition",),
        "AlertManagerDefinition",
        "AMP definition + amtool check-config",
        str,
        check_alert_manager_definition,
    ),
    ("AWS::APS::RuleGroupsNamespace", ("Data",), "Data", "promtool check rules", str, check_rules),
    (
        "AWS::APS::Scraper",
        ("ScrapeConfiguration", "ConfigurationBlob"),
        "ScrapeConfiguration",
        "AMP collector limits + promtool check config",
        _blob,
        check_scrape_configuration,
    ),
)


def check_documents(stacks: list[Stack]) -> list[DocumentCheck]:
    """Every document of ``CHECKS`` in ``stacks``, each with its engine's verdict."""
    out: list[DocumentCheck] = []
    for stack in stacks:
        for lid, resource in sorted((stack.template.get("Resources") or {}).items()):
            for rtype, path, label, engine, decode, check in CHECKS:
                if resource.get("Type") != rtype:
                    continue
                value: Any = resource.get("Properties") or {}
                for key in path:
                    value = value.get(key) if isinstance(value, dict) else None
                if value is None:
                    continue
                try:
                    ok, message = check(decode(render(value, stack)))
                except ValueError as err:
                    ok, message = False, str(err)
                out.append(DocumentCheck(stack.display_name, lid, label, engine, ok, message))
    return out


def failed_lines(env: str, results: list[DocumentCheck]) -> list[str]:
    return [
        f"review: {env}: {r.resource} {r.document} rejected by {r.engine}: {r.message}" for r in results if not r.ok
    ]
