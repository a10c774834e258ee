"""The seam to the workload renderers."""

from __future__ import annotations

import sys
import types

import pytest

from ops.errors import OpsError
from ops.submit import render


def test_unknown_workload():
    with pytest.raises(OpsError, match="unknown workload 'batch'; allowed: training, inference"):
        render.render("batch", None)


def test_renderer_output_must_be_the_expected_kind(monkeypatch):
    module = types.ModuleType("fake_renderer")
    module.render = lambda config: {"kind": "RayCluster", "metadata": {"name": "x"}}
    monkeypatch.setitem(sys.modules, "fake_renderer", module)
    monkeypatch.setattr(render, "renderers", lambda: {"training": "fake_renderer:render"})
    with pytest.raises(OpsError, match="returned a 'RayCluster' without a name; expected a named RayJob"):
        render.render("training", None)


def test_unregistered_or_broken_renderer_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(render, "renderers", dict)
    with pytest.raises(OpsError, match=r"no inference manifest renderer is registered \(manifests.registry\)"):
        render.render("inference", None)
    monkeypatch.setattr(render, "renderers", lambda: {"inference": "no_such_module_here:render"})
    with pytest.raises(OpsError, match="the inference manifest renderer no_such_module_here:render cannot be loaded"):
        render.render("inference", None)
