"""The review report's Sizing section: the training job's checkpoint, FSx and goodput row."""

from __future__ import annotations

from config import load_environment
from manifests import registry
from review.document import Document
from review.sizing import sizing_section
from sizing import storage


def test_sizing_section_shows_the_row_and_the_warning():
    doc = Document("r")
    sizing_section(doc, "prod")
    text = doc.markdown()
    assert "## Sizing: checkpoints, FSx and goodput" in text
    row = storage.table_row("prod", registry.plan_of(load_environment("prod")).checkpoint)
    assert row[1:5] == ["32 H100", "128", "8.03B", "96.4 GB"]
    assert "| " + " | ".join(row) + " |" in text
    assert "Synth warns: training.checkpoint_every_steps: 1000 steps" in text


def test_an_assembly_without_a_config_says_so():
    doc = Document("r")
    sizing_section(doc, "test")
    assert "No config/test.yaml: the sizing of this assembly's training job is not known here." in doc.markdown()
