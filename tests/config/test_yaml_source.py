"""A config file is UTF-8, one YAML document, with each key once per mapping and bounded in
size, depth and alias expansion; each refusal is one ``file:line:column`` line, fast."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from config import ConfigError, load_environment
from config.yaml_source import MAX_DEPTH, MAX_VALUES, read_yaml

ROOT = Path(__file__).resolve().parents[2]
DEV = (ROOT / "config" / "dev.yaml").read_text()

# Nine levels of nine aliases: about 390 million values once expanded, in a few hundred bytes.
BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10)
)


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    folder = tmp_path / "my-config"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    return folder


def errors_of(config_dir: Path, data: str | bytes) -> list[str]:
    path = config_dir / "broken.yaml"
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    with pytest.raises(ConfigError) as info:
        load_environment("broken", config_dir)
    return info.value.errors


def line_of(text: str, needle: str, nth: int = 1) -> int:
    lines = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    return lines[nth - 1]


def test_a_key_given_twice_names_both_places(config_dir):
    steps = next(line for line in DEV.splitlines() if line.strip().startswith("steps:"))
    indent = steps[: len(steps) - len(steps.lstrip())]
    text = DEV.replace(steps, f"{steps}\n{indent}steps: 4000", 1)
    first, second = line_of(text, steps), line_of(text, f"{indent}steps: 4000")
    assert errors_of(config_dir, text) == [
        f"my-config/broken.yaml:{second}:{len(indent) + 1}: key 'steps' is given twice in one mapping "
        f"(first at line {first}); remove one"
    ]


def test_merge_keys_still_override(tmp_path):
    data = read_yaml("base: &b {a: 1, b: 2}\nother:\n  <<: *b\n  b: 3\n", tmp_path / "x.yaml")
    assert data["other"] == {"a": 1, "b": 3}


def test_a_file_that_is_not_utf8_is_one_line(config_dir):
    text = DEV.encode().replace(b"ml-platform", b"ml-platf\xf6rm", 1)
    line = line_of(DEV, "ml-platform")
    column = DEV.splitlines()[line - 1].encode().index(b"ml-platform") + len("ml-platf") + 1
    assert errors_of(config_dir, text) == [
        f"my-config/broken.yaml:{line}:{column}: not UTF-8 text (byte 0xf6); save the file as UTF-8"
    ]


def test_nested_aliases_are_refused_at_once_in_a_fresh_process(config_dir):
    """The bomb made `cdk synth` and `hpray` spin past 18 GiB; refused here in well under the
    timeout (a generous bound for a loaded machine: the check is linear in the file's size)."""
    (config_dir / "broken.yaml").write_text(BOMB)
    code = (
        "from config import ConfigError, load_environment\n"
        "try:\n    load_environment('broken', __import__('pathlib').Path('my-config'))\n"
        "except ConfigError as e:\n    print('\\n'.join(e.errors))\n"
    )
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=config_dir.parent,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert out.stdout.splitlines() == [
        f"my-config/broken.yaml:6:5: this value expands to more than {MAX_VALUES:,} values through "
        f"anchors and aliases; a config file is at most {MAX_VALUES:,}"
    ], out.stderr
    assert time.monotonic() - started < 60


def test_the_size_check_counts_each_shared_node_once(tmp_path):
    # 3 ** 30 values once expanded, 30 lines of text: refused, and at once (no expansion).
    text = "a0: &a0 [x, x, x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}]\n" for i in range(1, 30))
    with pytest.raises(ConfigError, match="expands to more than"):
        read_yaml(text, tmp_path / "x.yaml")
    # Below the bound an alias is fine: a shared value is read as often as it is named.
    assert read_yaml("a: &a [1, 2]\nb: *a\nc: *a\n", tmp_path / "x.yaml")["c"] == [1, 2]


def test_nesting_and_recursion_are_refused(tmp_path):
    deep = "a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n"
    with pytest.raises(ConfigError) as info:
        read_yaml(deep, tmp_path / "x.yaml")
    assert info.value.errors[0].endswith(
        f"nested more than {MAX_DEPTH} levels deep; a config file is at most {MAX_DEPTH}"
    )
    with pytest.raises(ConfigError) as info:
        read_yaml("a: &a [1, *a]\n", tmp_path / "x.yaml")
    assert info.value.errors == [f"{tmp_path / 'x.yaml'}:1:4: an alias refers to a value that contains it"]


def test_a_huge_file_is_refused_before_it_is_parsed(tmp_path):
    with pytest.raises(ConfigError) as info:
        read_yaml("# " + "x" * (1024 * 1024) + "\n", tmp_path / "x.yaml")
    assert info.value.errors == [f"{tmp_path / 'x.yaml'}: 1,048,579 characters; a config file is at most 1,048,576"]
