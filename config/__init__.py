"""Per-environment configuration: YAML files beside this module, one typed model for all
(config.environment.EnvironmentConfig)."""

from config.loader import ConfigError, known_environments, load_environment, parse_environment

__all__ = ["ConfigError", "known_environments", "load_environment", "parse_environment"]
