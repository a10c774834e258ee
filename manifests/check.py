"""The environment checked against every registered workload: the placement, autoscaling and
checkpoint burst checks of sizing/placement.py run over the registry's plan
(manifests/registry.py), so a workload added to the registry is checked with no other edit.

``load_checked(name)`` loads an environment and raises its problems as a ConfigError. The config
loader runs the same checks over the built-in workloads' plan at load (config/loader.py, below
the registry); for the built-in registry the two plans are one object (sizing.plan.plan_of).
"""

from __future__ import annotations

from config import ConfigError, load_environment
from config.environment import EnvironmentConfig
from manifests import registry
from sizing import placement


def problems(env: EnvironmentConfig) -> list[str]:
    """Every problem of ``env``'s registered workloads, one line each (empty: all fit)."""
    return placement.problems(env, registry.plan_of(env))


def load_checked(name: str) -> EnvironmentConfig:
    """The environment ``name`` (config/NAME.yaml), checked against every registered workload."""
    env = load_environment(name)
    found = problems(env)
    if found:
        raise ConfigError(f"{name}.yaml", found)
    return env
