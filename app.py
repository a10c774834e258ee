#!/usr/bin/env python3
"""CDK entry point: load the environment's config (``-c env=NAME``, default dev), build its
stacks, register the compliance checks, synth. ``-c pipeline=true`` builds the delivery pipeline
instead (config/pipeline.yaml), whose Stages hold every environment's stacks."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import aws_cdk as cdk

from config import ConfigError
from config.environment import EnvironmentConfig
from constructs.compliance import register_compliance_checks
from manifests.check import load_checked
from stacks.pipeline_config import PipelineConfig, load_pipeline, pipeline_selected
from stacks.platform import PlatformStacks, build_platform

DEFAULT_ENVIRONMENT = "dev"
# No construct stack traces in the assembly: they hold jsii's temp paths and break determinism.
# CDK's built-in CloudFormation validation is off: cfn-lint checks every template against the same
# AWS resource schemas in `make synth` and `make test` (docs/benchmarks.md, "Synth").
APP_PROPS = {
    "stack_traces": False,
    "builtin_cloud_formation_validation": False,
    "context": {"aws:cdk:disable-creation-stack-traces": True},
}


def build_app(app: cdk.App, config: EnvironmentConfig) -> PlatformStacks:
    stacks = build_platform(app, config)
    register_compliance_checks(app)
    return stacks


def build_pipeline_app(app: cdk.App, pipeline: PipelineConfig, environments: list[EnvironmentConfig]):
    # Imported here: CDK Pipelines' modules would slow every environment's synth.
    from stacks.pipeline_stack import build_pipeline

    stack = build_pipeline(app, pipeline, environments)
    register_compliance_checks(app)
    return stack


def main() -> None:
    app = cdk.App(**APP_PROPS)
    # -c config_dir=PATH reads the YAML files from elsewhere (to try out a config).
    config_dir = app.node.try_get_context("config_dir")
    try:
        if pipeline_selected(app.node.try_get_context("pipeline")):
            build_pipeline_app(app, *(load_pipeline(Path(config_dir)) if config_dir else load_pipeline()))
        else:
            env_name = app.node.try_get_context("env") or DEFAULT_ENVIRONMENT
            build_app(app, load_checked(env_name, Path(config_dir)) if config_dir else load_checked(env_name))
    except ConfigError as err:
        print(err.render(), file=sys.stderr)
        sys.exit(1)
    app.synth()
    gc.freeze()  # the process ends next; exit then skips walking the construct tree (docs/benchmarks.md, "Synth")


if __name__ == "__main__":
    main()
