"""review/environment.py: a section that reads the environment's config opens with its heading,
then the config or why there is none."""

from __future__ import annotations

from config import ConfigError
from review import environment
from review.document import Document
from review.environment import environment_section


def test_a_known_environment_is_loaded_under_the_heading():
    doc = Document("r")
    config = environment_section(doc, "dev", heading="Things", subject="the things")
    assert config is not None and config.name == "dev"
    assert doc.blocks == [("h", (2, "Things"))]


def test_an_unknown_environment_says_so():
    doc = Document("r")
    assert environment_section(doc, "test", heading="Things", subject="the things of this assembly") is None
    assert doc.blocks == [
        ("h", (2, "Things")),
        ("p", "No config/test.yaml: the things of this assembly is not known here."),
    ]


def test_a_config_that_does_not_load_says_why(monkeypatch):
    def refuse(name: str):
        raise ConfigError(f"{name}.yaml", ["training.num_workers: 0 is below 1", "fsx.storage_capacity_gib: 1"])

    monkeypatch.setattr(environment, "load_checked", refuse)
    doc = Document("r")
    assert environment_section(doc, "dev", heading="Things", subject="the things") is None
    assert doc.blocks[1] == (
        "p",
        "config/dev.yaml does not load: training.num_workers: 0 is below 1; fsx.storage_capacity_gib: 1",
    )
