"""Publish the config model: a JSON Schema per YAML file and the configuration reference page.

``python -m docgen.reference`` writes ``config/schema/*.schema.json`` (editors complete and check
``config/*.yaml`` through the ``yaml-language-server`` line at the top of each file) and
``docs/reference/configuration.md``. Both are generated from the pydantic models only, so every
description, type, default and allowed value comes from the field that defines it.
``--check`` exits 1 when a committed file differs from what the models generate now.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from config import known_environments
from config.environment import EnvironmentConfig
from config.loader import CONFIG_DIR
from docgen.generated import write_or_check
from stacks.pipeline_config import PipelineConfig

ROOT = CONFIG_DIR.parent
SCHEMA_DIR = CONFIG_DIR / "schema"
REFERENCE_PAGE = ROOT / "docs" / "reference" / "configuration.md"
# Keys the loader fills in itself (config/loader.py), so a file need not set them.
FILLED_BY_LOADER = ("name",)
# Long enumerations (instance types) are summarised in the page; the schema keeps every value.
MAX_LISTED_VALUES = 25
TOP = "Top-level keys"
# The files each schema describes, as the page names them: a pattern, so that the page depends on
# the model only, never on which environment files a checkout has.
PAGE_FILES = {
    "environment.schema.json": "`config/ENV.yaml`, one per environment (`ENV` is the name `-c env=` and `--env` take)",
    "pipeline.schema.json": "`config/pipeline.yaml`",
}


def schema_line(schema_file: str) -> str:
    """The first line of a config YAML that points editors at its schema."""
    return f"# yaml-language-server: $schema=./schema/{schema_file}"


def _schema(model: type[BaseModel], title: str) -> dict[str, Any]:
    schema = model.model_json_schema(mode="validation")
    schema["title"] = title
    schema["required"] = [r for r in schema.get("required", []) if r not in FILLED_BY_LOADER]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def schemas() -> dict[str, tuple[dict[str, Any], list[str]]]:
    """File name under config/schema/ -> (the schema, the YAML files under config/ it describes)."""
    envs = [f"{name}.yaml" for name in known_environments()]
    return {
        "environment.schema.json": (_schema(EnvironmentConfig, "Environment (config/ENV.yaml)"), envs),
        "pipeline.schema.json": (
            _schema(PipelineConfig, "Delivery pipeline (config/pipeline.yaml)"),
            ["pipeline.yaml"],
        ),
    }


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    return defs[ref.rsplit("/", 1)[1]] if ref else node


def _variants(prop: dict[str, Any]) -> list[dict[str, Any]]:
    variants: list[dict[str, Any]] = prop.get("anyOf", [prop])
    return variants


def _type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    names = []
    for v in _variants(prop):
        if "$ref" in v:
            names.append("mapping")
        elif v.get("type") == "array":
            names.append(f"list of {_type(_resolve(v.get('items', {}), defs), defs)}")
        elif v.get("type") == "object":
            extra = v.get("additionalProperties")
            names.append(f"mapping to {_type(extra, defs)}" if isinstance(extra, dict) else "mapping")
        elif "const" in v:
            names.append(json.dumps(v["const"]))
        elif "enum" in v or "type" in v:
            names.append(v.get("type", "string"))
    return " or ".join(dict.fromkeys(names)) or "any"


def _allowed(prop: dict[str, Any]) -> str:
    parts: list[str] = []
    for v in _variants(prop):
        values = v.get("enum") or ([v["const"]] if "const" in v else [])
        if len(values) > MAX_LISTED_VALUES:
            parts.append(f"one of {len(values)} values (see the schema), e.g. {', '.join(map(str, values[:3]))}")
        elif values:
            parts.append(", ".join(f"`{x}`" for x in values))
        bounds = [("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<")]
        parts += [f"{sign} {v[k]}" for k, sign in bounds if k in v]
        if "minItems" in v:
            parts.append(f"at least {v['minItems']} item(s)")
        if "maxItems" in v:
            parts.append(f"at most {v['maxItems']} item(s)")
        if "minLength" in v:
            parts.append(f"at least {v['minLength']} character(s)")
        if "pattern" in v:
            parts.append(f"matches `{v['pattern']}`")
    return "; ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _prose(text: str) -> str:
    """Description text for a table cell: <placeholders> must not read as HTML tags."""
    return _cell(text.replace("<", "&lt;").replace(">", "&gt;"))


def _section(path: str, model: dict[str, Any], defs: dict[str, Any], out: list[str]) -> None:
    nested: list[tuple[str, dict[str, Any]]] = []
    required = set(model.get("required", []))
    out += [f"### {path}" if path == TOP else f"### `{path}`", "", _prose(model.get("description", "")), ""]
    out += ["| key | type | default | allowed | description |", "| --- | --- | --- | --- | --- |"]
    for key, prop in model["properties"].items():
        if key in required:
            default = "**required**"
        elif path == TOP and key in FILLED_BY_LOADER:
            default = "set by the loader"
        elif "default" in prop:
            default = f"`{json.dumps(prop['default'])}`"
        else:
            default = "see below" if any("$ref" in v for v in _variants(prop)) else "(empty)"
        out.append(
            f"| `{key}` | {_cell(_type(prop, defs))} | {_cell(default)} | {_cell(_allowed(prop))} "
            f"| {_prose(prop.get('description', ''))} |"
        )
        for v in _variants(prop):
            if "$ref" in v:
                nested.append((key if path == TOP else f"{path}.{key}", _resolve(v, defs)))
            elif v.get("type") == "array" and "$ref" in v.get("items", {}):
                nested.append((f"{key}[]" if path == TOP else f"{path}.{key}[]", _resolve(v["items"], defs)))
    out.append("")
    for sub_path, sub in nested:
        _section(sub_path, sub, defs, out)


def reference_markdown() -> str:
    out = [
        "<!-- Generated by `python -m docgen.reference` from the pydantic models in config/; do not edit. -->",
        "",
        "# Configuration reference",
        "",
        "Every key of the YAML files under `config/`, generated from the config model: its type, its",
        "default (**required** keys have none), the values the schema allows, and what it does. Rules",
        "that involve several keys (a subnet inside a CIDR block, workers that fit an instance group)",
        "are checked when the file is loaded and described with the key they guard. See",
        "[Configuration](../configuration.md) for how files are chosen and errors reported.",
        "",
    ]
    for schema_file, (schema, _) in schemas().items():
        defs = schema.get("$defs", {})
        listed = PAGE_FILES[schema_file]
        out += [f"## {schema['title']}", "", f"Files: {listed}; JSON Schema: `config/schema/{schema_file}`.", ""]
        _section(TOP, schema, defs, out)
    return "\n".join(out).rstrip() + "\n"


def generated_files() -> dict[Path, str]:
    files = {SCHEMA_DIR / name: json.dumps(schema, indent=2) + "\n" for name, (schema, _) in schemas().items()}
    files[REFERENCE_PAGE] = reference_markdown()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m docgen.reference", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file is stale; write nothing")
    args = parser.parse_args(argv)
    return write_or_check(generated_files(), root=ROOT, check=args.check, hint=" (run: python -m docgen.reference)")


if __name__ == "__main__":
    sys.exit(main())
