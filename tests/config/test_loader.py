"""Every config error read from a file carries ``file:line:column`` of the offending value (the
YAML node marks), as well as the key path; a YAML syntax error names the file and the place."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import ConfigError, load_environment

ROOT = Path(__file__).resolve().parents[2]
DEV = (ROOT / "config" / "dev.yaml").read_text()


def place(text: str, line_text: str, value: str | None = None) -> str:
    """``line:column`` (1-based) of ``value`` on the first line holding ``line_text`` (the start
    of ``line_text`` itself when ``value`` is None)."""
    for number, line in enumerate(text.splitlines(), 1):
        if line_text in line:
            column = line.index(value if value is not None else line_text.lstrip()) + 1
            return f"{number}:{column}"
    raise AssertionError(f"{line_text!r} not in the file")


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    folder = tmp_path / "my-config"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)  # places are shown relative to the working directory
    return folder


def errors_of(config_dir: Path, text: str) -> list[str]:
    (config_dir / "broken.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_environment("broken", config_dir)
    assert info.value.source == "broken.yaml"
    return info.value.errors


def test_each_error_names_file_line_and_column_of_its_value(config_dir):
    text = DEV.replace("vpc_cidr: 10.10.0.0/16", "vpc_cidr: 10.10.0.0/33")
    text = text.replace("  Owner: ml-platform\n", "  Owner: ml-platform\n  Ownr: typo\n", 1)
    assert "vpc_cidr: 10.10.0.0/33" in text and "Ownr: typo" in text
    errors = errors_of(config_dir, text)
    file = "my-config/broken.yaml"
    vpc = place(text, "vpc_cidr: 10.10.0.0/33", "10.10.0.0/33")
    # The messages themselves are tested in test_model.py; here: the place before the key path.
    assert len(errors) == 2
    assert errors[1].startswith(f"{file}:{vpc}: network.vpc_cidr: '10.10.0.0/33' is not a valid IPv4 CIDR block")
    # An unknown key points at the key itself.
    typo = place(text, "  Ownr: typo", "Ownr")
    assert errors[0] == f"{file}:{typo}: tags.Ownr: unknown key 'Ownr'; did you mean 'Owner'?"


def test_a_value_inside_a_list_and_a_model_level_error_are_placed(config_dir):
    # instance_count of the first instance group, and two groups with the same name (a check of
    # the whole list, whose message names its key path).
    count_line = next(line for line in DEV.splitlines() if line.strip().startswith("instance_count:"))
    text = DEV.replace(count_line, count_line.split(":")[0] + ": -2", 1)
    errors = errors_of(config_dir, text)
    where = place(text, count_line.split(":")[0] + ": -2", "-2")
    assert errors == [
        f"my-config/broken.yaml:{where}: hyperpod.instance_groups[0].instance_count: "
        "Input should be greater than or equal to 0 (given: -2)"
    ]


def test_a_missing_key_points_at_its_parent(config_dir):
    text = DEV.replace("  vpc_cidr: 10.10.0.0/16\n", "", 1)
    errors = errors_of(config_dir, text)
    network = place(text, "network:")
    # The parent mapping's value starts on the line after "network:" (its first key).
    line = int(network.split(":")[0]) + 1
    column = len(text.splitlines()[line - 1]) - len(text.splitlines()[line - 1].lstrip()) + 1
    assert errors == [f"my-config/broken.yaml:{line}:{column}: network.vpc_cidr: required key is missing"]


def test_a_yaml_syntax_error_names_the_file_and_the_place(config_dir):
    errors = errors_of(config_dir, "name: broken\nnetwork: [1\nregion: us-east-1\n")
    assert errors == [
        "my-config/broken.yaml:3:7: not valid YAML: expected ',' or ']', but got ':' (while parsing a flow sequence)"
    ]


def test_a_file_that_is_not_a_mapping(config_dir):
    assert errors_of(config_dir, "- a\n- b\n") == [
        "my-config/broken.yaml:1:1: the file must hold a mapping of keys to values"
    ]


def test_a_check_across_keys_is_placed_at_the_key_its_message_names(config_dir):
    text = DEV.replace("production: false", "production: true", 1).replace("  Owner: ml-platform\n", "", 1)
    errors = errors_of(config_dir, text)
    tags_value = int(place(text, "tags:").split(":")[0]) + 1  # the mapping starts on its first key
    assert f"my-config/broken.yaml:{tags_value}:3: tags: production environments require Owner" in errors


def test_the_pipeline_file_errors_are_placed_too(config_dir):
    from stacks.pipeline_config import load_pipeline

    for name in ("dev.yaml", "pipeline.yaml"):
        (config_dir / name).write_text((ROOT / "config" / name).read_text())
    text = (config_dir / "pipeline.yaml").read_text()
    stages_line = next(line for line in text.splitlines() if line.startswith("stages:"))
    text = text.replace(stages_line, "stages: [dev, qa]")
    text = text.replace('account: "444444444444"', 'account: "4444"', 1)
    (config_dir / "pipeline.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_pipeline(config_dir)
    qa = place(text, "stages: [dev, qa]", "qa")
    account = place(text, 'account: "4444"', '"4444"')
    assert info.value.errors[-1] == (
        f"my-config/pipeline.yaml:{qa}: stages[1]: unknown environment 'qa'; known environments: dev"
    )
    assert info.value.errors[0].startswith(f"my-config/pipeline.yaml:{account}: account: ")
