"""What makes every synth faster and nothing else: ``start`` imports synth's pure-Python modules
on a second thread while the jsii kernel is busy, and ``synth`` freezes what Python built once
the assembly is written.

A synth spends ~0.6 s in which Python only waits on the jsii kernel's pipe: starting the kernel
and loading aws-cdk-lib's assemblies (``import aws_cdk``), then loading cdk-nag's. The config
models (pydantic and YAML, ~0.13 s) and the generated Python modules of the AWS services the
stacks use (~0.3 s of unmarshalling and class creation) are pure Python: importing them sends
nothing to the kernel, so they can run in those windows. That takes ~0.2 s off every synth
(bench/synth_bench.py). This module imports nothing at load, so it can run before aws_cdk.

Only modules whose import never talks to the kernel may be listed: the kernel's pipe is not
thread-safe. tests/stacks/test_preload.py checks that for every module below, and that the list
covers the service modules the stacks import. A module that fails to import here is simply
imported again, and fails with its own error, where the code needs it.
"""

from __future__ import annotations

import gc
import importlib
import threading
from typing import Any

# Pure Python, independent of aws_cdk: safe to import before the kernel starts.
CONFIG_MODULES = ("config.loader", "config.pipeline")
# aws-cdk-lib's generated service modules the stacks import (they need aws_cdk imported first).
# Not the kubectl layer's package: importing it loads its assembly into the kernel.
SERVICE_MODULES = tuple(
    f"aws_cdk.{name}"
    for name in (
        "aws_ec2",
        "aws_sagemaker",
        "aws_eks_v2",
        "aws_lambda",
        "aws_s3",
        "aws_logs",
        "aws_kms",
        "aws_fsx",
        "aws_s3_deployment",
        "aws_secretsmanager",
        "aws_ecr",
        "aws_aps",
        "aws_events",
        "aws_events_targets",
        "aws_sns",
        "aws_sns_subscriptions",
        "aws_elasticache",
    )
)


def _import_all(names: tuple[str, ...]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # re-raised by the import that needs the module
            return


def import_in_background(names: tuple[str, ...]) -> threading.Thread:
    """Start importing ``names`` on a daemon thread; the main thread's own imports of them wait
    for it (Python's per-module import locks) or find them done."""
    thread = threading.Thread(target=_import_all, args=(names,), name="preload-imports", daemon=True)
    thread.start()
    return thread


def start() -> None:
    """The config models on a second thread while ``import aws_cdk`` starts the kernel, then
    aws-cdk-lib's service modules while cdk-nag loads (app.py calls this before its imports)."""
    import_in_background(CONFIG_MODULES)
    import aws_cdk  # noqa: F401  (starts the kernel; the service modules need it imported)

    import_in_background(SERVICE_MODULES)


def synth(app: Any) -> None:
    """``app.synth()``, then ``gc.freeze()``: the process ends next, and freezing what Python built
    (the construct tree's proxies, aws-cdk-lib's generated modules) keeps the interpreter's
    collections at exit from walking all of it again (docs/benchmarks.md, "Synth")."""
    app.synth()
    gc.freeze()
