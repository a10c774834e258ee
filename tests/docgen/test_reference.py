"""The published JSON Schemas and the configuration reference page match the config model, and
every config YAML points at its schema and validates against it."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from config.loader import CONFIG_DIR
from config.prices import PRICES_FILE
from docgen.reference import ROOT, generated_files, main, schema_line, schemas


@pytest.mark.parametrize("path", sorted(generated_files()), ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_file_is_what_the_model_generates(path):
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: run `python -m docgen.reference`"
    assert path.read_text() == generated_files()[path], (
        f"{path.relative_to(ROOT)} is stale: run `python -m docgen.reference` and commit the result"
    )


def test_check_mode_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    page = tmp_path / "configuration.md"
    page.write_text("old\n")
    files = {page: "new\n"}
    monkeypatch.setattr("docgen.reference.generated_files", lambda: files)
    monkeypatch.setattr("docgen.reference.ROOT", tmp_path)
    assert main(["--check"]) == 1
    assert "stale: configuration.md" in capsys.readouterr().err
    page.write_text("new\n")
    assert main(["--check"]) == 0


def _properties(schema):
    """(where, property schema) for every key of every model the schema reaches."""
    models = [("(top level)", schema), *schema.get("$defs", {}).items()]
    for model_name, model in models:
        for key, prop in model.get("properties", {}).items():
            yield f"{model_name}.{key}", prop


@pytest.mark.parametrize("schema_file", sorted(schemas()))
def test_every_key_has_a_description(schema_file):
    schema, _ = schemas()[schema_file]
    missing = [where for where, prop in _properties(schema) if not prop.get("description", "").strip()]
    assert not missing, f"add Field(description=...) to: {', '.join(missing)}"
    models = [name for name, model in schema.get("$defs", {}).items() if not model.get("description")]
    assert not models, f"add a docstring to the models: {', '.join(models)}"


def _yaml_files():
    return [(schema_file, name) for schema_file, (_, files) in schemas().items() for name in files]


@pytest.mark.parametrize(("schema_file", "name"), _yaml_files())
def test_config_file_names_its_schema_and_validates(schema_file, name):
    text = (CONFIG_DIR / name).read_text()
    assert text.splitlines()[0] == schema_line(schema_file)
    committed = json.loads((CONFIG_DIR / "schema" / schema_file).read_text())
    jsonschema.Draft202012Validator.check_schema(committed)
    errors = [e.message for e in jsonschema.Draft202012Validator(committed).iter_errors(yaml.safe_load(text))]
    assert errors == []


def test_every_config_file_has_a_schema():
    # The price table beside config/prices.py is data the code reads, not a config one writes.
    covered = {name for _, name in _yaml_files()}
    assert covered == {p.name for p in CONFIG_DIR.glob("*.yaml")} - {PRICES_FILE.name}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda d: d["network"].update(aws_interface_endpoint=True),
            "Additional properties are not allowed ('aws_interface_endpoint'",
        ),
        (lambda d: d["fsx"].update(throughput_mb_s_per_tib=300), "300 is not one of [125, 250, 500, 1000]"),
        (
            lambda d: d["hyperpod"]["instance_groups"][0].update(instance_type="ml.g5.13xlarge"),
            "'ml.g5.13xlarge' is not one of",
        ),
        (lambda d: d.pop("network"), "'network' is a required property"),
        (lambda d: d.update(account="12345"), "'12345' does not match '^[0-9]{12}$'"),
    ],
    ids=["unknown key", "throughput", "instance type", "missing section", "account"],
)
def test_the_schema_rejects_what_the_model_rejects(change, expected):
    schema = json.loads((CONFIG_DIR / "schema" / "environment.schema.json").read_text())
    data = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())
    change(data)
    messages = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(data)]
    assert any(m.startswith(expected) for m in messages), messages


def test_the_generated_files_do_not_depend_on_which_environments_exist(monkeypatch, tmp_path):
    """A user who adds config/mytest.yaml (or removes one) gets the same generated files."""
    before = generated_files()
    monkeypatch.setattr("docgen.reference.known_environments", lambda: ["dev", "mytest", "prod", "staging"])
    assert generated_files() == before
    monkeypatch.setattr("docgen.reference.known_environments", lambda: ["dev"])
    assert generated_files() == before
