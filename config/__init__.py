"""Per-environment configuration: YAML files beside this module, one typed model for all."""

from config.loader import ConfigError, known_environments, load_environment, parse_environment
from config.model import EnvironmentConfig

__all__ = ["ConfigError", "EnvironmentConfig", "known_environments", "load_environment", "parse_environment"]
