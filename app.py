#!/usr/bin/env python3
"""CDK entry point: pick the environment from context, validate its config once, build the
stacks, register the compliance checks."""

from __future__ import annotations

import sys
from pathlib import Path

import aws_cdk as cdk

from config import ConfigError, EnvironmentConfig, load_environment
from constructs.compliance import register_compliance_checks
from stacks.platform import PlatformStacks, build_platform

DEFAULT_ENVIRONMENT = "dev"
# No construct stack traces in the assembly: they hold jsii's temp paths and break determinism.
APP_PROPS = {"stack_traces": False, "context": {"aws:cdk:disable-creation-stack-traces": True}}


def build_app(app: cdk.App, config: EnvironmentConfig) -> PlatformStacks:
    stacks = build_platform(app, config)
    register_compliance_checks(app)
    return stacks


def main() -> None:
    app = cdk.App(**APP_PROPS)
    env_name = app.node.try_get_context("env") or DEFAULT_ENVIRONMENT
    # -c config_dir=PATH reads the environment YAML from elsewhere (to try out a config).
    config_dir = app.node.try_get_context("config_dir")
    try:
        config = load_environment(env_name, Path(config_dir)) if config_dir else load_environment(env_name)
    except ConfigError as err:
        print(err.render(), file=sys.stderr)
        sys.exit(1)
    build_app(app, config)
    app.synth()


if __name__ == "__main__":
    main()
