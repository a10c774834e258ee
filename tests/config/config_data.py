"""The committed environment YAML as ``parse_environment`` takes it, and the errors a change to it gets
(the loader's and the checks over the plan: ``manifests.check.parse_checked``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from config import ConfigError
from config.loader import CONFIG_DIR
from manifests.check import parse_checked


def env_data(env: str) -> dict[str, Any]:
    data = yaml.safe_load((CONFIG_DIR / f"{env}.yaml").read_text())
    data["name"] = env
    return data


def config_errors(env: str, mutate: Callable[[dict[str, Any]], object]) -> list[str]:
    """The errors ``parse_checked`` reports for ``env``'s committed config after ``mutate``."""
    data = env_data(env)
    mutate(data)
    with pytest.raises(ConfigError) as info:
        parse_checked(data, source=f"{env}.yaml")
    return info.value.errors
