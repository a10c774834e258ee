"""The workloads image asset: the synth refuses a hash the manifests would not name."""

from __future__ import annotations

import re
import tempfile

import aws_cdk as cdk
import pytest

from constructs.workloads_image import WorkloadsImage, WorkloadsImageMismatch
from manifests import image


def _stack():
    app = cdk.App(outdir=tempfile.mkdtemp())
    return cdk.Stack(app, "S", env=cdk.Environment(account="111111111111", region="us-east-1"))


def test_image_uri_is_the_rendered_one_and_an_output():
    img = WorkloadsImage(_stack(), "Img")
    assert img.image_uri == image.image_uri("111111111111", "us-east-1")
    assert img.image_uri.endswith(":" + img.asset.asset_hash)
    assert img.node.find_child("Uri") is not None


def test_synth_fails_when_the_hash_port_disagrees_with_aws_cdk_lib(monkeypatch):
    monkeypatch.setattr(image, "asset_hash", lambda root=image.REPO_ROOT: "0" * 64)
    with pytest.raises(WorkloadsImageMismatch, match=re.escape("manifests.image computes 0000")):
        WorkloadsImage(_stack(), "Img")
