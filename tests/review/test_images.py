"""review/images.py: the images table, generated from the synthesized assembly and the rendered
charts and manifests, and the check that no pod of an images_from_ecr environment names an
image nothing fills."""

from __future__ import annotations

import pytest

from config import versions
from review import images as im
from review.__main__ import main as review_main
from review.assembly import load_assembly

ENVS = ["dev", "staging", "prod"]


def _rows(synthesized, env):
    from constructs.chart_pods import chart_pods

    assembly, config, _ = synthesized(env)
    chart_pods(config)  # a missing chart or helm skips (tests/conftest.py), like every chart test
    stacks = load_assembly(assembly.directory).stacks
    return config, stacks, im.image_rows(stacks, config)


@pytest.mark.parametrize("env", ENVS)
def test_every_image_has_a_source_and_a_presence_guarantee(env, synthesized):
    _, _, rows = _rows(synthesized, env)
    assert im.unfilled(env, rows) == []
    for r in rows:
        assert r.source and r.presence, r
    pods = {r.use.pod.split(" (")[0] for r in rows}
    # Helm releases, the HyperPod agent the kubectl handler applies, Ray pods, add-ons.
    assert "Deployment kuberay-system/kuberay-operator" in pods
    assert "DaemonSet kube-system/nvidia-device-plugin" in pods
    assert "DaemonSet aws-hyperpod/health-monitoring-agent" in pods
    assert any(p.startswith("RayJob ") for p in pods) and any(p.startswith("RayService ") for p in pods)
    assert any(p.startswith("EKS add-on vpc-cni") for p in pods)


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_closed_networks_get_the_device_plugin_from_a_cdk_asset(env, synthesized):
    config, _, rows = _rows(synthesized, env)
    plugin = next(r for r in rows if r.use.pod.startswith("DaemonSet kube-system/nvidia-device-plugin "))
    assert plugin.use.image.startswith(
        f"{config.account}.dkr.ecr.{config.region}.amazonaws.com/cdk-hnb659fds-container-assets-"
    )
    assert plugin.source.startswith("CDK asset `NVIDIA device plugin`")
    assert versions.nvidia_device_plugin_upstream() in plugin.source
    llm = next(r for r in rows if r.use.image.endswith(f"/docker-hub/rayproject/ray-llm:{versions_tag()}"))
    assert config.network.docker_hub_credential_secret_arn in llm.presence
    assert all(r.source.startswith(("CDK asset", "pull-through", "AWS's")) for r in rows)


def versions_tag() -> str:
    from manifests import k8s

    return k8s.RAY_LLM_IMAGE.rsplit(":", 1)[1]


def test_dev_pulls_public_images_through_nat(synthesized):
    _, _, rows = _rows(synthesized, "dev")
    plugin = next(r for r in rows if r.use.pod.startswith("DaemonSet kube-system/nvidia-device-plugin "))
    assert plugin.use.image == f"{versions.NVIDIA_DEVICE_PLUGIN_IMAGE}:{versions.NVIDIA_DEVICE_PLUGIN_TAG}"
    assert plugin.source == "public registry nvcr.io through the NAT gateway"


def _mirror_values(original):
    """The device plugin's values before this check: an ECR 'mirror' repository nothing fills."""

    def values(config):
        out = original(config)
        if config.network.images_from_ecr:
            registry = versions.ecr_registry(config.account, config.region)
            out["image"] = {"repository": f"{registry}/mirror/nvidia/k8s-device-plugin"}
        return out

    return values


def test_an_empty_mirror_repository_fails_naming_the_pod_and_image(synthesized, monkeypatch):
    from constructs import hyperpod_dependencies

    monkeypatch.setattr(
        hyperpod_dependencies,
        "nvidia_device_plugin_values",
        _mirror_values(hyperpod_dependencies.nvidia_device_plugin_values),
    )
    _, _, rows = _rows(synthesized, "prod")
    image = f"333333333333.dkr.ecr.us-east-1.amazonaws.com/mirror/nvidia/k8s-device-plugin:{versions.NVIDIA_DEVICE_PLUGIN_TAG}"
    assert im.unfilled("prod", rows)[0] == (
        "images: prod: DaemonSet kube-system/nvidia-device-plugin (Helm release nvidia-device-plugin) container "
        f"nvidia-device-plugin-ctr names {image}: no CDK asset and no pull-through cache rule fills it"
    )


def test_review_exits_5_on_an_unfilled_image(synthesized, monkeypatch, tmp_path, capsys):
    from constructs import hyperpod_dependencies

    _rows(synthesized, "prod")
    assembly = synthesized("prod")[0]
    monkeypatch.setattr(
        hyperpod_dependencies,
        "nvidia_device_plugin_values",
        _mirror_values(hyperpod_dependencies.nvidia_device_plugin_values),
    )
    rc = review_main([str(assembly.directory), "--out", str(tmp_path), "--no-diagram"])
    err = capsys.readouterr().err
    assert rc == 5
    assert "mirror/nvidia/k8s-device-plugin" in err and "nvidia-device-plugin-ctr" in err
    report = next(tmp_path.glob("*.md")).read_text()
    assert "NOTHING: no CDK asset and no pull-through cache rule fills it" in report


def _use(image: str) -> im.ImageUse:
    return im.ImageUse("Deployment x/y", "c", image)


def test_a_public_image_in_a_closed_network_is_unfilled(synthesized):
    config, stacks, _ = _rows(synthesized, "staging")
    row = im.classify(_use("rayproject/ray-llm:2.60.0"), config, im.assets_of(stacks), im.rules_of(stacks))
    assert row.problem == "docker.io is outside ECR and network.images_from_ecr pulls only from ECR"


def test_an_asset_tag_no_stack_publishes_is_unfilled(synthesized):
    config, stacks, _ = _rows(synthesized, "staging")
    repo = f"{config.account}.dkr.ecr.{config.region}.amazonaws.com/cdk-hnb659fds-container-assets-{config.account}-{config.region}"
    row = im.classify(_use(f"{repo}:{'0' * 64}"), config, im.assets_of(stacks), im.rules_of(stacks))
    assert row.problem == "no CDK asset and no pull-through cache rule fills it"


def test_image_references_split_like_docker():
    assert im._split("rayproject/ray:2.60.0") == ("docker.io", "rayproject/ray", "2.60.0")
    assert im._split("quay.io/kuberay/operator:v1.7.0") == ("quay.io", "kuberay/operator", "v1.7.0")
    assert im._split("nvcr.io/nvidia/x:v1@sha256:ab") == ("nvcr.io", "nvidia/x", "sha256:ab")
    assert im._split("localhost:5000/a") == ("localhost:5000", "a", "latest")
