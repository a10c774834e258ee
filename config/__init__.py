"""Per-environment configuration: YAML files beside this module, one typed model for all
(config.environment.EnvironmentConfig)."""

from config.errors import ConfigError
from config.loader import known_environments, load_environment, parse_environment

__all__ = ["ConfigError", "known_environments", "load_environment", "parse_environment"]
