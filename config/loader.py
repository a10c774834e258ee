"""Load one environment's YAML into the frozen model, reporting every error at once.

The typed config only: the checks over the environment's plan (placement, autoscaling, the
checkpoint burst) sit above it, in ``manifests.check``, which the entry points call."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from config.environment import EnvironmentConfig
from config.errors import ConfigError
from config.yaml_source import display_path, read_text, read_yaml

CONFIG_DIR = Path(__file__).resolve().parent


# YAML files in config/ that are not environments: the pipeline's config (stacks/pipeline_config.py)
# and the price table (config/prices.py).
NON_ENVIRONMENT_FILES = frozenset({"pipeline", "prices"})


# What marks a checkout of this repository: the CDK app beside its config/ folder.
CHECKOUT_MARKERS = ("cdk.json", "app.py")


def checkout_config_dir(start: Path | None = None) -> Path | None:
    """The config/ folder of the checkout at or above ``start`` (default: the current folder): a
    folder with the CDK app (cdk.json, app.py) and environment files in config/; None outside one."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if all((d / m).is_file() for m in CHECKOUT_MARKERS) and known_environments(d / "config"):
            return d / "config"
    return None


def known_environments(config_dir: Path = CONFIG_DIR) -> list[str]:
    return sorted(p.stem for p in config_dir.glob("*.yaml") if p.stem not in NON_ENVIRONMENT_FILES)


def _model_at(path: tuple[Any, ...], root: type[BaseModel] = EnvironmentConfig) -> type[BaseModel] | None:
    """The pydantic model class that holds the location ``path`` (for key suggestions)."""
    model: Any = root
    for part in path:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if isinstance(model, type) else None
        if field is None:
            # alias lookup
            field = (
                next((f for f in model.model_fields.values() if f.alias == part), None)
                if isinstance(model, type)
                else None
            )
        if field is None:
            return None
        ann = field.annotation
        model = _unwrap(ann)
        if model is None:
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(ann: Any) -> Any:
    import typing

    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in typing.get_args(ann):
        found = _unwrap(arg)
        if found is not None:
            return found
    return None


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


# Keys that were renamed: (dotted path) -> (new key, why). The old name gets its own message
# instead of an unknown-key error with an unrelated suggestion.
RENAMED_KEYS: dict[str, tuple[str, str]] = {
    "network.closed_network": (
        "aws_interface_endpoints",
        "it adds interface endpoints for the AWS APIs and never closed egress to the internet (NAT stays); "
        "pulling images only from ECR is network.images_from_ecr",
    ),
}

# Keys that are gone -> why, and what does their work now.
REMOVED_KEYS: dict[str, str] = {
    "training.submitter_backoff_limit": (
        "every RayJob runs in HTTPMode, with no submitter pod to retry (backoffLimit 0); "
        "a training run's retries are training.max_failures"
    ),
}


# ---------------------------------------------------------------------------------------------
# Places: file:line:column of a key path, from the YAML node marks
# ---------------------------------------------------------------------------------------------

# (key path, at the key itself rather than its value) -> "file:line:column", or None
Place = Callable[[tuple[Any, ...], bool], str | None]


def _node_marks(node: yaml.Node, prefix: tuple[Any, ...], marks: dict[tuple[Any, ...], yaml.Mark]) -> None:
    marks[prefix] = node.start_mark
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                marks[(*prefix, key.value, "<key>")] = key.start_mark
                _node_marks(value, (*prefix, key.value), marks)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _node_marks(item, (*prefix, i), marks)


def places_of(text: str, path: Path) -> Place:
    """A lookup from a key path (pydantic ``loc`` or a dotted ``a.b[0].c``) to ``file:line:column``
    of the value there; a key that is not in the file (a missing one) gets its nearest parent."""
    # Composed on the first lookup: a valid config never needs a place.
    marks: dict[tuple[Any, ...], yaml.Mark] = {}
    composed = False
    shown = display_path(path)

    def place(loc: tuple[Any, ...], at_key: bool = False) -> str | None:
        nonlocal composed
        if not composed:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
            if root is not None:
                _node_marks(root, (), marks)
            composed = True
        found: tuple[Any, ...] = ()
        for part in loc:
            key = part if isinstance(part, int) else str(part)
            if (*found, key) in marks:
                found = (*found, key)
            # Parts that are not keys (a union member's tag) are skipped.
        if loc and not found:
            return None  # not a key path of this file
        mark = marks.get((*found, "<key>")) if at_key else None
        mark = mark or marks.get(found)
        return f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else None

    return place


_DOTTED = re.compile(r"^([A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*|\[\d+\])*)(?=: )")


def _parse_dotted(text: str) -> tuple[Any, ...] | None:
    """``a.b[0].c: ...`` -> ("a", "b", 0, "c"); None when the line starts with no key path."""
    m = _DOTTED.match(text)
    if not m:
        return None
    return tuple(int(p) if p.isdigit() else p for p in re.findall(r"[A-Za-z_]\w*|\d+", m.group(1)))


def with_place(line: str, loc: tuple[Any, ...], place: Place | None, at_key: bool = False) -> str:
    """``line`` with ``file:line:column`` of the key path it starts with (else of ``loc``) in front."""
    if place is None:
        return line
    # A model-level message names its own key path at the start of the line.
    dotted = _parse_dotted(line)
    where = (place(dotted, at_key) if dotted else None) or place(loc, at_key)
    return f"{where}: {line}" if where else line


def format_validation_error(
    err: ValidationError, root: type[BaseModel] = EnvironmentConfig, place: Place | None = None
) -> list[str]:
    """One line per problem: the key path, what is wrong, the value and what is allowed; with
    ``place`` (from :func:`places_of`), each line starts with ``file:line:column`` of the value."""
    lines: list[str] = []
    for e in err.errors(include_url=False):
        loc = tuple(p for p in e["loc"] if p not in ("function-after[_layout()]",))
        start = len(lines)
        _describe(e, loc, root, lines)
        at_key = e["type"] == "extra_forbidden"
        lines[start:] = [with_place(line, loc, place, at_key) for line in lines[start:]]
    return lines


def _describe(e: Any, loc: tuple[Any, ...], root: type[BaseModel], lines: list[str]) -> None:
    where = _loc(loc)
    kind = e["type"]
    if kind == "extra_forbidden":
        parent, key = loc[:-1], loc[-1]
        renamed = RENAMED_KEYS.get(_loc(loc))
        if renamed:
            lines.append(f"{where}: renamed to {renamed[0]!r}; {renamed[1]}")
            return
        if _loc(loc) in REMOVED_KEYS:
            lines.append(f"{where}: removed; {REMOVED_KEYS[_loc(loc)]}")
            return
        model = _model_at(parent, root)
        valid = []
        if model is not None:
            valid = [f.alias or n for n, f in model.model_fields.items()]
        close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        allowed = f" (allowed: {', '.join(sorted(valid))})" if valid and not close else ""
        lines.append(f"{where}: unknown key {key!r}{hint}{allowed}")
        return
    msg = e["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    given = e.get("input")
    if kind == "missing":
        lines.append(f"{where}: required key is missing")
    elif kind in ("value_error", "assertion_error"):
        for part in msg.split("\n"):
            # Model-level messages already name their fields.
            lines.append(part if part.startswith(where.split(".")[0] + ".") or not where else f"{where}: {part}")
    else:
        shown = repr(given) if not isinstance(given, (dict, list)) else type(given).__name__
        lines.append(f"{where}: {msg} (given: {shown})")


def load_environment(name: str, config_dir: Path = CONFIG_DIR) -> EnvironmentConfig:
    """Read ``config/<name>.yaml`` and validate it; raise ConfigError with every problem."""
    return load_environment_with_place(name, config_dir)[0]


def load_environment_with_place(name: str, config_dir: Path = CONFIG_DIR) -> tuple[EnvironmentConfig, str, Place]:
    """:func:`load_environment`, with the source name and the place lookup of its file (for
    errors found after the load: ``manifests.check``)."""
    known = known_environments(config_dir)
    path = config_dir / f"{name}.yaml"
    if name not in known:
        raise ConfigError(
            f"-c env={name}",
            [f"unknown environment {name!r}; known environments: {', '.join(known)}"],
        )
    text = read_text(path)
    data = read_yaml(text, path)
    if not isinstance(data, dict):
        raise ConfigError(path.name, [f"{display_path(path)}:1:1: the file must hold a mapping of keys to values"])
    data.setdefault("name", name)
    place = places_of(text, path)
    return parse_environment(data, source=path.name, place=place), path.name, place


def parse_environment(
    data: dict[str, Any], *, source: str = "<config>", place: Place | None = None
) -> EnvironmentConfig:
    try:
        env = EnvironmentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(source, format_validation_error(err, place=place)) from None
    return env
