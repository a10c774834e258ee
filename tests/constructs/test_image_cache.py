"""constructs/image_cache.py in the synthesized cluster and HyperPod stacks: a closed network
gets a pull-through cache rule per upstream the charts and manifests name, Docker Hub's with the
credential secret the operator names in config (never one created with a placeholder), no ECR
repository that nothing fills, and the pulling roles may import."""

from __future__ import annotations

import pytest

from tests.conftest import template_of


def _of_type(template: dict, kind: str) -> dict[str, dict]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def _statements(template: dict, sid: str) -> list[dict]:
    return [
        s
        for r in _of_type(template, "AWS::IAM::Policy").values()
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Sid") == sid
    ]


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_closed_networks_get_the_rules_the_images_need(env, synthesized):
    _, config, stacks = synthesized(env)
    assert config.network.images_from_ecr
    t = template_of(stacks.cluster).to_json()
    rules = {
        r["Properties"]["EcrRepositoryPrefix"]: r["Properties"]
        for r in _of_type(t, "AWS::ECR::PullThroughCacheRule").values()
    }
    assert set(rules) == {"quay", "docker-hub"}
    assert (rules["quay"]["UpstreamRegistryUrl"], rules["quay"]["UpstreamRegistry"]) == ("quay.io", "quay")
    assert "CredentialArn" not in rules["quay"]
    assert rules["docker-hub"]["UpstreamRegistryUrl"] == "registry-1.docker.io"
    # The operator's secret, imported: no secret and no repository in the template.
    assert rules["docker-hub"]["CredentialArn"] == config.network.docker_hub_credential_secret_arn
    assert not [s for s in _of_type(t, "AWS::SecretsManager::Secret").values() if "ecr-pullthroughcache" in str(s)]
    # The NVIDIA device plugin is a CDK asset (constructs/device_plugin_image.py); the mirror
    # repository (logical ID ImageCacheNvidiaDevicePluginMirror...) that nothing filled is gone.
    assert _of_type(t, "AWS::ECR::Repository") == {}
    # The system nodes pull the operator through the quay.io rule; the HyperPod nodes the LLM image.
    hyperpod = template_of(stacks.hyperpod).to_json()
    for template in (t, hyperpod):
        (statement,) = _statements(template, "PullThroughCacheImport")
        assert sorted(statement["Action"]) == ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"]
        assert len(statement["Resource"]) == 2


def test_an_open_network_pulls_upstream_without_rules(synthesized):
    _, config, stacks = synthesized("dev")
    assert not config.network.images_from_ecr
    t = template_of(stacks.cluster).to_json()
    assert _of_type(t, "AWS::ECR::PullThroughCacheRule") == {}
    assert stacks.cluster.image_cache is None


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_no_stack_holds_an_ecr_repository(env, synthesized):
    """Images come from CDK assets (the bootstrap's repository) and pull-through rules (ECR creates
    their repositories): no repository of these stacks can hold images that stop `cdk destroy`."""
    _, _, stacks = synthesized(env)
    for stack in (stacks.network, stacks.storage, stacks.cluster, stacks.hyperpod):
        assert _of_type(template_of(stack).to_json(), "AWS::ECR::Repository") == {}, stack.stack_name
