"""The workloads image as a Docker image asset: ``cdk deploy`` (and the pipeline's asset stage)
builds ``workloads/Dockerfile`` and pushes it to the environment's CDK bootstrap repository.

Every manifest names it through ``manifests.image.image_uri`` (same hash, computed from the
same files); this construct fails the synth if aws-cdk-lib's hash and that one ever differ.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import CfnOutput, IgnoreMode, Stack
from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import Construct

from manifests import image


class WorkloadsImageMismatch(Exception):
    pass


class WorkloadsImage(Construct):
    """The asset; ``image_uri`` is the concrete URI the manifests name for this account/region."""

    def __init__(self, scope: Construct, construct_id: str, *, context: Path = image.REPO_ROOT) -> None:
        super().__init__(scope, construct_id)
        self.asset = ecr_assets.DockerImageAsset(
            self,
            "Asset",
            directory=str(context),
            file=image.DOCKERFILE,
            platform=ecr_assets.Platform.LINUX_AMD64,
            ignore_mode=IgnoreMode.DOCKER,
            display_name="workloads image",
        )
        expected = image.asset_hash(context)
        if self.asset.asset_hash != expected:
            raise WorkloadsImageMismatch(
                f"workloads image: aws-cdk-lib hashed the build context as {self.asset.asset_hash} but "
                f"manifests.image computes {expected}; the rendered manifests would name an "
                "image that cdk deploy never pushes. Update manifests/image.py to this "
                "aws-cdk-lib's asset hashing (tests/workloads/test_image.py shows where they differ)."
            )
        stack = Stack.of(self)
        self.image_uri = image.image_uri(stack.account, stack.region, context)
        CfnOutput(
            self,
            "Uri",
            value=self.asset.image_uri,
            description="The workloads image every RayJob/RayService of this environment runs",
        )
