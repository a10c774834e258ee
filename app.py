#!/usr/bin/env python3
"""CDK entry point: load the environment's config (``-c env=NAME``, default dev), build its
stacks, register the compliance checks, synth. ``-c pipeline=true`` builds the delivery pipeline
instead (config/pipeline.yaml), whose Stages hold every environment's stacks.

The platform's modules are imported inside :func:`main`, not here: the jsii kernel (a Node
process) starts, loads the assemblies and creates the App on a thread of its own while this
thread imports the modules that make no kernel call and loads the config, so the two processes
work at once instead of in turn (docs/benchmarks.md, "Synth").
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    import aws_cdk as cdk

    from config.environment import EnvironmentConfig
    from stacks.pipeline_config import PipelineConfig
    from stacks.platform import PlatformStacks

T = TypeVar("T")
DEFAULT_ENVIRONMENT = "dev"
# No construct stack traces in the assembly: they hold jsii's temp paths and break determinism.
# No tree.json: the CDK CLI reads it only for notices and telemetry, both off in cdk.json, and
# nothing here reads it; writing it walks every construct (3 % of a synth). An IDE's construct
# explorer needs it: set tree_metadata to True for that (tests/test_app.py holds the reason).
# CDK's built-in CloudFormation validation is off: cfn-lint checks every template against the same
# AWS resource schemas in `make synth` and `make test` (docs/benchmarks.md, "Synth").
APP_PROPS = {
    "stack_traces": False,
    "tree_metadata": False,
    "builtin_cloud_formation_validation": False,
    "context": {"aws:cdk:disable-creation-stack-traces": True},
}

# Imported while the kernel starts and loads aws-cdk-lib: they import no jsii package. typeguard
# is jsii's: its runtime type checks import it at their first check (the App's, on the kernel
# thread); imported here, while that thread waits on Node, it is off the kernel thread's path.
CONFIG_MODULES = ("manifests.check", "stacks.pipeline_config", "typeguard")
# Imported once aws-cdk-lib is loaded, while the kernel creates the App and loads cdk-nag: they
# make no kernel call at import (tests/test_app.py holds both lists to that).
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


@dataclass(frozen=True)
class Context:
    """What the CLI's context selects: read from the App (on the kernel thread, as it creates it)
    or, before the App exists, from what the CLI handed the app (:func:`cli_context`)."""

    env: str | None
    pipeline: object
    config_dir: str | None


def start_app(load: Callable[[Context], T]) -> tuple[cdk.App, T]:
    """The App, with every module and assembly a synth needs, and ``load`` run on its context.

    The kernel (jsii's Node process) takes one request at a time, so one thread talks to it: it
    loads aws-cdk-lib, creates the App and reads its context, then loads cdk-nag. Meanwhile this
    thread imports the config's and the platform's Python modules and runs ``load`` (the config:
    pure Python, no kernel call) on the context the CLI handed over, kept if the App's agrees.
    Once aws-cdk-lib is loaded, the kernel thread imports no module of aws-cdk-lib's services:
    those import each other (a service's classes name another's), and two threads importing them
    at once can each hold a module the other needs, which Python resolves by handing one a
    half-made module (tests/test_app.py).
    """
    # The kernel thread waits on the kernel and then on the interpreter lock, which this thread
    # holds while it imports: at the default 5 ms switch interval, each of its dozen requests
    # would wait up to 5 ms more. Put back once both threads are done.
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="jsii-kernel") as kernel:
            jsii_loaded = kernel.submit(importlib.import_module, "jsii")
            cdk_loaded = kernel.submit(importlib.import_module, "aws_cdk")
            created = kernel.submit(_new_app)
            nag_loaded = kernel.submit(importlib.import_module, "cdk_nag")
            # Node starts only once the kernel thread has imported jsii's client: that import
            # gets the interpreter lock to itself, and Node starts some 70 ms sooner.
            jsii_loaded.result()
            for name in CONFIG_MODULES:
                importlib.import_module(name)
            # While the kernel thread still loads aws-cdk-lib: the config, from the context the
            # CLI hands the app. The App's own context decides: it is used only if they agree.
            early = Attempt.of(load, cli_context())
            cdk_loaded.result()
            for name in PLATFORM_MODULES:
                importlib.import_module(name)
            app, context = created.result()
            loaded = early.result() if early.context == context else load(context)
            nag_loaded.result()
            return app, loaded
    finally:
        sys.setswitchinterval(switch_interval)


def _new_app() -> tuple[cdk.App, Context]:
    import aws_cdk as cdk

    app = cdk.App(**APP_PROPS)
    get = app.node.try_get_context
    return app, Context(env=get("env"), pipeline=get("pipeline"), config_dir=get("config_dir"))


def cli_context() -> Context | None:
    """The context as the CDK CLI hands it to the app (``CDK_CONTEXT_JSON``), read before the App
    exists; None when it is not there. The App also reads a context file the CLI writes for a
    large context, so this is a guess that :func:`start_app` checks against the App's."""
    try:
        values = json.loads(os.environ["CDK_CONTEXT_JSON"])
    except (KeyError, ValueError):
        return None
    if not isinstance(values, dict):
        return None
    return Context(env=values.get("env"), pipeline=values.get("pipeline"), config_dir=values.get("config_dir"))


@dataclass(frozen=True)
class Attempt(Generic[T]):
    """``load`` run on a context: its value or the exception it raised, to hand over later."""

    context: Context | None
    value: T | None = None
    error: Exception | None = None

    @classmethod
    def of(cls, load: Callable[[Context], T], context: Context | None) -> Attempt[T]:
        if context is None:
            return cls(context=None)
        try:
            return cls(context=context, value=load(context))
        except Exception as err:  # handed over by result(), if this context is the App's
            return cls(context=context, error=err)

    def result(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


def load_selected(context: Context) -> EnvironmentConfig | tuple[PipelineConfig, list[EnvironmentConfig]]:
    """The environment's config with the checks over its plan, or the pipeline's config with
    every stage's environment (a config error raises ConfigError)."""
    from manifests.check import load_checked
    from stacks.pipeline_config import load_pipeline, pipeline_selected

    # -c config_dir=PATH reads the YAML files from elsewhere (to try out a config).
    config_dir = Path(context.config_dir) if context.config_dir else None
    if pipeline_selected(context.pipeline):
        return load_pipeline(config_dir) if config_dir else load_pipeline()
    env_name = context.env or DEFAULT_ENVIRONMENT
    return load_checked(env_name, config_dir) if config_dir else load_checked(env_name)


def main() -> None:
    # One synth per process: the collector's passes over aws-cdk-lib's classes and the construct
    # tree would free nothing the exit does not (docs/benchmarks.md, "Synth").
    gc.disable()
    try:
        app, loaded = start_app(load_selected)
    except Exception as err:
        from config import ConfigError

        if not isinstance(err, ConfigError):
            raise
        print(err.render(), file=sys.stderr)  # one message, no traceback
        sys.exit(1)
    if isinstance(loaded, tuple):
        build_pipeline_app(app, *loaded)
    else:
        build_app(app, loaded)
    app.synth()
    gc.freeze()  # the process ends next; exit then skips walking the construct tree (docs/benchmarks.md, "Synth")


if __name__ == "__main__":
    main()
