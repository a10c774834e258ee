"""The review report's Placement section: the pools of the environment with their pods."""

from __future__ import annotations

from config import load_environment
from manifests import registry
from review.document import Document
from review.placement import placement_section
from sizing import placement


def test_placement_section_lists_every_pool_in_every_situation():
    doc = Document("r")
    placement_section(doc, "prod")
    text = doc.markdown()
    assert "## Placement" in text
    rows = placement.table(load_environment("prod"), plan=registry.plan_of(load_environment("prod")))
    # As configured, a RayService upgrade, a node replaced in each of the three HyperPod groups;
    # four pools each.
    assert len(rows) == 5 * 4
    assert rows[0][:3] == ["as configured", "system", "3 x m7i.2xlarge"]
    assert "RayJob train-llama-7b-fineweb worker x4" in rows[1][3]
    for row in rows:
        assert "| " + " | ".join(row[:3]) in text


def test_an_assembly_without_a_config_says_so():
    doc = Document("r")
    placement_section(doc, "test")
    assert "No config/test.yaml: the placement of this assembly's pods is not known here." in doc.markdown()
