"""The NVIDIA device plugin as a CDK Docker image asset (``network.images_from_ecr``).

nvcr.io is the plugin's only registry and ECR's pull-through cache cannot cache it. A CDK
``DockerImageAsset`` built from ``images/nvidia-device-plugin/Dockerfile`` (only ``FROM`` the
pinned ``repository:tag@digest`` of config/versions.py) is published by ``cdk deploy``, and by the
pipeline's asset stage, into the environment's CDK assets repository before the stack that holds
it deploys. The device plugin's Helm values name that URI; the HyperPod node roles already pull
from that repository (the workloads image), so nothing is copied by hand and nothing is empty
when the first GPU node comes up.

The URI is a pure function of the directory and the build arguments (aws-cdk-lib's asset hash,
ported in manifests/image.py), so the Helm values and every renderer know it without a
construct; the construct fails the synth if aws-cdk-lib hashes it differently.
"""

from __future__ import annotations

import json
from pathlib import Path

from aws_cdk import IgnoreMode, Stack
from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import Construct

from config import versions
from manifests import image

DIRECTORY = image.REPO_ROOT / "images" / "nvidia-device-plugin"
DISPLAY_NAME = "NVIDIA device plugin"


class DevicePluginImageMismatch(Exception):
    pass


def build_args() -> dict[str, str]:
    return {"IMAGE": versions.nvidia_device_plugin_upstream()}


def asset_hash(directory: Path = DIRECTORY) -> str:
    """The asset hash (= image tag) aws-cdk-lib gives this directory with :func:`build_args`."""
    # aws-ecr-assets' extraHash for our props: buildArgs, platform, its invalidation version.
    extra = json.dumps(
        {"buildArgs": build_args(), "platform": {"platform": image.PLATFORM}, "version": image.ECR_ASSETS_HASH_VERSION},
        separators=(",", ":"),
    )
    return image.fingerprint(directory, exclude=["!Dockerfile"], extra_hash=extra)


def repository(account: str, region: str) -> str:
    """``registry/repository`` (no tag) the device plugin is pulled from."""
    return f"{image.registry(account, region)}/{image.repository_name(account, region)}"


def image_uri(account: str, region: str) -> str:
    return f"{repository(account, region)}:{asset_hash()}"


class NvidiaDevicePluginImage(Construct):
    """The asset; ``image_uri`` is the concrete URI the device plugin's Helm values name."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.asset = ecr_assets.DockerImageAsset(
            self,
            "Asset",
            directory=str(DIRECTORY),
            build_args=build_args(),
            platform=ecr_assets.Platform.LINUX_AMD64,
            ignore_mode=IgnoreMode.DOCKER,
            display_name=DISPLAY_NAME,
        )
        expected = asset_hash()
        if self.asset.asset_hash != expected:
            raise DevicePluginImageMismatch(
                f"NVIDIA device plugin image: aws-cdk-lib hashed the asset as {self.asset.asset_hash} but "
                f"constructs/device_plugin_image.py computes {expected}; the device plugin's Helm values "
                "would name an image that cdk deploy never pushes. Update asset_hash() to this "
                "aws-cdk-lib's extraHash (aws-ecr-assets image-asset.js)."
            )
        stack = Stack.of(self)
        self.image_uri = image_uri(stack.account, stack.region)
