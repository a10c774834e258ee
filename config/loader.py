"""Load one environment's YAML into the frozen model, reporting every error at once."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from config.model import EnvironmentConfig

CONFIG_DIR = Path(__file__).resolve().parent


class ConfigError(Exception):
    """A configuration is invalid. ``errors`` holds one line per problem."""

    def __init__(self, source: str, errors: list[str]):
        self.source = source
        self.errors = errors
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.errors)
        head = f"{self.source}: {n} configuration error{'s' if n != 1 else ''}:"
        return "\n".join([head] + [f"  - {e}" for e in self.errors])


# YAML files in config/ that are not environments: the pipeline's config (config/pipeline.py).
NON_ENVIRONMENT_FILES = frozenset({"pipeline"})


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


def format_validation_error(err: ValidationError, root: type[BaseModel] = EnvironmentConfig) -> list[str]:
    lines: list[str] = []
    for e in err.errors(include_url=False):
        loc = tuple(p for p in e["loc"] if p not in ("function-after[_layout()]",))
        where = _loc(loc)
        kind = e["type"]
        if kind == "extra_forbidden":
            parent, key = loc[:-1], loc[-1]
            renamed = RENAMED_KEYS.get(_loc(loc))
            if renamed:
                lines.append(f"{where}: renamed to {renamed[0]!r}; {renamed[1]}")
                continue
            if _loc(loc) in REMOVED_KEYS:
                lines.append(f"{where}: removed; {REMOVED_KEYS[_loc(loc)]}")
                continue
            model = _model_at(parent, root)
            valid = []
            if model is not None:
                valid = [f.alias or n for n, f in model.model_fields.items()]
            close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            allowed = f" (allowed: {', '.join(sorted(valid))})" if valid and not close else ""
            lines.append(f"{where}: unknown key {key!r}{hint}{allowed}")
            continue
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
    return lines


def load_environment(name: str, config_dir: Path = CONFIG_DIR) -> EnvironmentConfig:
    """Read ``config/<name>.yaml`` and validate it; raise ConfigError with every problem."""
    known = known_environments(config_dir)
    path = config_dir / f"{name}.yaml"
    if name not in known:
        raise ConfigError(
            f"-c env={name}",
            [f"unknown environment {name!r}; known environments: {', '.join(known)}"],
        )
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(str(path.name), [f"not valid YAML: {err}"]) from None
    if not isinstance(data, dict):
        raise ConfigError(path.name, ["the file must hold a mapping of keys to values"])
    data.setdefault("name", name)
    return parse_environment(data, source=path.name)


def parse_environment(data: dict[str, Any], *, source: str = "<config>") -> EnvironmentConfig:
    try:
        return EnvironmentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(source, format_validation_error(err)) from None
