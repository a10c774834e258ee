"""The Helm base: release-name and pin validation, and what HelmRelease puts in the template."""

from __future__ import annotations

import pytest

from config.versions import ChartPin
from constructs.helm import HELM_RELEASE_NAME_MAX, ChartRelease, release_name_problem

PIN = ChartPin("demo", "https://example.invalid/charts", "1.2.3")


def test_release_name_limit_is_helms_53():
    assert HELM_RELEASE_NAME_MAX == 53
    assert release_name_problem("a" * 53) is None


def test_release_name_too_long():
    with pytest.raises(ValueError) as info:
        ChartRelease(release="a" * 54, pin=PIN, namespace="demo")
    assert str(info.value) == f"Helm release name {'a' * 54!r} is not valid: 54 characters; Helm allows at most 53"


@pytest.mark.parametrize("name", ["Upper", "-lead", "trail-", "under_score", ""])
def test_release_name_syntax(name):
    with pytest.raises(ValueError) as info:
        ChartRelease(release=name, pin=PIN, namespace="demo")
    assert str(info.value) == (
        f"Helm release name {name!r} is not valid: allowed: lowercase letters, digits and '-', "
        "starting and ending with a letter or digit"
    )


def test_namespace_syntax():
    with pytest.raises(ValueError) as info:
        ChartRelease(release="demo", pin=PIN, namespace="Bad_NS")
    assert str(info.value) == (
        "namespace 'Bad_NS' is not a Kubernetes namespace name; allowed: 1-63 lowercase letters, "
        "digits and '-', starting and ending with a letter or digit"
    )


@pytest.mark.parametrize("version", ["latest", ">=1.0.0", "1.2"])
def test_chart_must_be_pinned_to_a_release(version):
    with pytest.raises(ValueError) as info:
        ChartRelease(release="demo", pin=ChartPin("demo", PIN.repository, version), namespace="demo")
    assert str(info.value) == f"chart demo version {version!r} is not pinned to a release version"


def test_timeout_within_the_kubectl_handler_limit():
    with pytest.raises(ValueError) as info:
        ChartRelease(release="demo", pin=PIN, namespace="demo", timeout_minutes=20)
    assert str(info.value) == "Helm timeout 20 min is outside 1-15 min"


def test_every_chart_in_the_template_is_pinned_and_creates_its_namespace(synthesized):
    from tests.conftest import template_of

    for env in ("dev", "prod"):
        _, _, stacks = synthesized(env)
        charts = [
            r["Properties"]
            for r in template_of(stacks.cluster).to_json()["Resources"].values()
            if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"
        ]
        assert {c["Chart"] for c in charts} == {"kuberay-operator", "nvidia-device-plugin", "aws-efa-k8s-device-plugin"}
        for chart in charts:
            assert chart["Version"] and chart["Repository"].startswith("https://")
            assert chart["CreateNamespace"] is True
            assert chart["Wait"] is True and chart["Atomic"] is True
            assert chart.get("SkipCrds", False) is False  # CRDs (KubeRay) installed
            assert len(chart["Release"]) <= 53
