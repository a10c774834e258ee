"""constructs/device_plugin_image.py: in a closed network the NVIDIA device plugin is a CDK image
asset built FROM the pinned nvcr.io digest, and its Helm values name exactly the URI the asset
is published to."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import constructs.device_plugin_image as dpi
from config import versions
from constructs.hyperpod_dependencies import nvidia_device_plugin_values


def test_upstream_is_pinned_by_tag_and_digest():
    assert f"v{versions.NVIDIA_DEVICE_PLUGIN.version}" == versions.NVIDIA_DEVICE_PLUGIN_TAG
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", versions.NVIDIA_DEVICE_PLUGIN_DIGEST)
    assert versions.nvidia_device_plugin_upstream() == (
        f"nvcr.io/nvidia/k8s-device-plugin:{versions.NVIDIA_DEVICE_PLUGIN_TAG}@{versions.NVIDIA_DEVICE_PLUGIN_DIGEST}"
    )


def test_the_dockerfile_is_only_from_the_build_argument():
    lines = [
        line
        for line in (dpi.DIRECTORY / "Dockerfile").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines == ["ARG IMAGE", "FROM ${IMAGE}"]


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_asset_is_published_where_the_helm_values_point(env, synthesized):
    assembly, config, stacks = synthesized(env)
    assert stacks.cluster.device_plugin_image is not None
    assert stacks.cluster.device_plugin_image.image_uri == dpi.image_uri(config.account, config.region)
    manifest = json.loads((Path(assembly.directory) / f"{stacks.cluster.artifact_id}.assets.json").read_text())
    (image,) = [i for i in manifest["dockerImages"].values() if i.get("displayName") == dpi.DISPLAY_NAME]
    assert image["source"]["dockerBuildArgs"] == {"IMAGE": versions.nvidia_device_plugin_upstream()}
    (dest,) = image["destinations"].values()
    values = nvidia_device_plugin_values(config)["image"]
    assert f"{versions.ecr_registry(config.account, config.region)}/{dest['repositoryName']}" == values["repository"]
    assert dest["imageTag"] == values["tag"] == dpi.asset_hash()


def test_open_networks_pull_from_nvcr_with_the_chart_default(synthesized):
    _, config, stacks = synthesized("dev")
    assert stacks.cluster.device_plugin_image is None
    assert "image" not in nvidia_device_plugin_values(config)


def test_the_hash_follows_the_pinned_upstream(monkeypatch):
    before = dpi.asset_hash()
    monkeypatch.setattr(versions, "NVIDIA_DEVICE_PLUGIN_DIGEST", "sha256:" + "0" * 64)
    assert dpi.asset_hash() != before
