"""Reading a config file: UTF-8 text, one YAML document, bounded and with unique keys.

A config is a few hundred lines written by people; what is refused here is what such a file never
needs and what would make every reader (``cdk synth``, ``hpray``) stall or guess:

- bytes that are not UTF-8 (one line with the byte's place, not an internal error);
- a key given twice in one mapping (YAML's last-one-wins would hide the first value): both places;
- more than ``MAX_CHARACTERS`` of text, nesting deeper than ``MAX_DEPTH``, or anchors and aliases that
  expand to more than ``MAX_VALUES`` values. PyYAML shares an aliased node, so the document loads
  at once; the validator then walks it as a tree, and nine nested levels of nine aliases are about
  390 million values: a few hundred bytes that held ``cdk synth`` at full CPU past 18 GiB. The size
  is counted on the composed node graph with one count per distinct node, so the check itself
  takes time in the file's size, not in the expansion.

Each refusal is a ``ConfigError`` of one line that starts with ``file:line:column``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from config.errors import ConfigError

# Bounds a config file stays far inside: dev.yaml is about 5 KiB, 700 values and 6 levels deep.
MAX_CHARACTERS = 1024 * 1024
MAX_DEPTH = 64
MAX_VALUES = 100_000


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when under it (what an editor or terminal opens)."""
    try:
        return os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


def _where(path: Path, mark: yaml.Mark | None) -> str:
    shown = display_path(path)
    return f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark is not None else shown


def read_text(path: Path) -> str:
    """The file's text; bytes that are not UTF-8 are one ConfigError line with their place."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ConfigError(
            path.name,
            [
                f"{display_path(path)}:{line}:{column}: not UTF-8 text (byte 0x{data[err.start]:02x}); "
                "save the file as UTF-8"
            ],
        ) from None


def _key_text(node: yaml.Node) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _check(root: yaml.Node, path: Path) -> None:
    """Unique keys, depth and expanded size of the composed document (see the module docstring)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if depth > MAX_DEPTH:
            raise ConfigError(
                path.name,
                [
                    f"{_where(path, node.start_mark)}: nested more than {MAX_DEPTH} levels deep; a config file is at most {MAX_DEPTH}"
                ],
            )
        if key in active:  # &a [*a]: an alias inside the value it names
            raise ConfigError(
                path.name, [f"{_where(path, node.start_mark)}: an alias refers to a value that contains it"]
            )
        active.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, yaml.Mark] = {}
            for k, v in node.value:
                text = _key_text(k)
                if text is not None and k.tag != "tag:yaml.org,2002:merge":
                    if text in seen:
                        first = seen[text]
                        raise ConfigError(
                            path.name,
                            [
                                f"{_where(path, k.start_mark)}: key {text!r} is given twice in one mapping "
                                f"(first at line {first.line + 1}); remove one"
                            ],
                        )
                    seen[text] = k.start_mark
                total += size(k, depth + 1) + size(v, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                total += size(item, depth + 1)
        if total > MAX_VALUES:
            raise ConfigError(
                path.name,
                [
                    f"{_where(path, node.start_mark)}: this value expands to more than {MAX_VALUES:,} values "
                    f"through anchors and aliases; a config file is at most {MAX_VALUES:,}"
                ],
            )
        active.discard(key)
        sizes[key] = total
        return total

    size(root, 0)


def read_yaml(text: str, path: Path) -> Any:
    """The YAML document of ``path``, checked as the module docstring says; a syntax error is one
    ConfigError line with its place."""
    if len(text) > MAX_CHARACTERS:
        raise ConfigError(
            path.name,
            [f"{display_path(path)}: {len(text):,} characters; a config file is at most {MAX_CHARACTERS:,}"],
        )
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check(root, path)
        return loader.construct_document(root)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err)
        context = getattr(err, "context", None)
        raise ConfigError(
            path.name, [f"{_where(path, mark)}: not valid YAML: {problem}" + (f" ({context})" if context else "")]
        ) from None
    except RecursionError:
        raise ConfigError(
            path.name, [f"{display_path(path)}: nested too deep to read; a config file is at most {MAX_DEPTH} levels"]
        ) from None
    finally:
        loader.dispose()
