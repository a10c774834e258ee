#!/usr/bin/env python3
"""CDK entry point: load the environment's config (``-c env=NAME``, default dev), build its
stacks, register the compliance checks, synth. ``-c pipeline=true`` builds the delivery pipeline
instead (config/pipeline.yaml), whose Stages hold every environment's stacks.

The platform's modules are imported inside :func:`main`, not here: the jsii kernel (a Node
process) starts, loads the assemblies and creates the App on a thread of its own while this
thread imports the modules that make no kernel call, so the two processes work at once instead
of in turn (docs/benchmarks.md, "Synth").
"""

from __future__ import annotations

import gc
import importlib
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aws_cdk as cdk

    from config.environment import EnvironmentConfig
    from stacks.pipeline_config import PipelineConfig
    from stacks.platform import PlatformStacks

DEFAULT_ENVIRONMENT = "dev"
# No construct stack traces in the assembly: they hold jsii's temp paths and break determinism.
# CDK's built-in CloudFormation validation is off: cfn-lint checks every template against the same
# AWS resource schemas in `make synth` and `make test` (docs/benchmarks.md, "Synth").
APP_PROPS = {
    "stack_traces": False,
    "builtin_cloud_formation_validation": False,
    "context": {"aws:cdk:disable-creation-stack-traces": True},
}

# Imported while the kernel starts and loads aws-cdk-lib: they import no jsii package.
CONFIG_MODULES = ("manifests.check", "stacks.pipeline_config")
# Imported once aws-cdk-lib is loaded, while the kernel creates the App and loads cdk-nag and the
# kubectl layer: they make no kernel call at import (tests/test_app.py holds both lists to that).
PLATFORM_MODULES = ("stacks.platform", "constructs.compliance")


def build_app(app: cdk.App, config: EnvironmentConfig) -> PlatformStacks:
    from constructs.compliance import register_compliance_checks
    from stacks.platform import build_platform

    stacks = build_platform(app, config)
    register_compliance_checks(app)
    return stacks


def build_pipeline_app(app: cdk.App, pipeline: PipelineConfig, environments: list[EnvironmentConfig]):
    # Imported here: CDK Pipelines' modules would slow every environment's synth.
    from constructs.compliance import register_compliance_checks
    from stacks.pipeline_stack import build_pipeline

    stack = build_pipeline(app, pipeline, environments)
    register_compliance_checks(app)
    return stack


def start_app() -> cdk.App:
    """The App, with every module and assembly a synth needs.

    The kernel (jsii's Node process) takes one request at a time, so one thread talks to it: it
    loads aws-cdk-lib, creates the App, then loads cdk-nag and the kubectl layer of the newest
    Kubernetes version (the default; an environment on another version loads its own when
    built), while this thread imports the config's and the platform's Python modules.
    """
    # The kernel thread waits on the kernel and then on the interpreter lock, which this thread
    # holds while it imports: at the default 5 ms switch interval, each of its dozen requests
    # would wait up to 5 ms more. Put back once both threads are done.
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="jsii-kernel") as kernel:
            cdk_loaded = kernel.submit(importlib.import_module, "aws_cdk")
            app = kernel.submit(_new_app)
            rest_loaded = kernel.submit(_load_checks_and_kubectl)
            for name in CONFIG_MODULES:
                importlib.import_module(name)
            cdk_loaded.result()
            for name in PLATFORM_MODULES:
                importlib.import_module(name)
            rest_loaded.result()
            return app.result()
    finally:
        sys.setswitchinterval(switch_interval)


def _new_app() -> cdk.App:
    import aws_cdk as cdk

    return cdk.App(**APP_PROPS)


def _load_checks_and_kubectl() -> None:
    from config import versions

    importlib.import_module("cdk_nag")
    importlib.import_module(versions.KUBECTL_LAYERS[versions.newest_kubernetes_version()][0])


def main() -> None:
    # One synth per process: the collector's passes over aws-cdk-lib's classes and the construct
    # tree would free nothing the exit does not (docs/benchmarks.md, "Synth").
    gc.disable()
    app = start_app()
    from config import ConfigError
    from manifests.check import load_checked
    from stacks.pipeline_config import load_pipeline, pipeline_selected

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
