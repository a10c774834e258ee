"""Load an environment and check it against the plan of every registered workload: what the entry
points (app.py, the pipeline, ``hpray``, ``python -m manifests check``, the rigs) call before they
use a config.

``config.loader`` returns the typed config only (the container image and the renderers need no
more); the checks over the plan run here, above the registry (manifests/registry.py), so a
workload added to the registry is checked with no other edit: placement, the autoscaling check
and the checkpoint burst against FSx (``sizing.placement.problems``). A problem is a
:class:`config.ConfigError` line, with the ``file:line:column`` of its key when the config came
from a file, as the loader's own errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from config.environment import EnvironmentConfig
from config.errors import ConfigError
from config.loader import CONFIG_DIR, Place, load_environment_with_place, parse_environment, with_place
from manifests import registry
from sizing import placement


def problems(env: EnvironmentConfig) -> list[str]:
    """Every problem of ``env``'s registered workloads, one line each (empty: all fit)."""
    return placement.problems(env, registry.plan_of(env))


def check(env: EnvironmentConfig, *, source: str = "<config>", place: Place | None = None) -> EnvironmentConfig:
    """``env`` itself when it passes the checks over its plan; ConfigError with every problem."""
    found = problems(env)
    if found:
        raise ConfigError(source, [with_place(line, (), place) for line in found])
    return env


def parse_checked(data: dict[str, Any], *, source: str = "<config>", place: Place | None = None) -> EnvironmentConfig:
    """:func:`config.loader.parse_environment`, then the checks over the plan."""
    return check(parse_environment(data, source=source, place=place), source=source, place=place)


def load_checked(name: str, config_dir: Path = CONFIG_DIR) -> EnvironmentConfig:
    """:func:`config.loader.load_environment` (``config/<name>.yaml``), then the checks over the plan."""
    env, source, place = load_environment_with_place(name, config_dir)
    return check(env, source=source, place=place)
