"""Shared fixtures: build and synthesize the CDK app exactly as `cdk synth` does."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from artifacts.pinned import ArtifactUnavailable, missing_summary
from tests.shared_artifacts import SHARED_HINT, carries, seed_cache

ROOT = Path(__file__).resolve().parent.parent
# The real charts and CRDs of the shared test folder (../shared beside the checkout, unless
# HYPERPOD_RAY_SHARED names another folder, or an empty one to test a clone without it) go into
# the artifact cache, digest-checked; product code reads only the cache. A copy with another
# digest stays out: the tests that need it skip with its one line (below).
SHARED_REFUSED = seed_cache()
# jsii runs on the project's pinned Node 22 (package.json), as under `make`.
os.environ["PATH"] = f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
# Ray's authentication mode, stated: unset, a test's local ray.init() turns token mode on and
# writes ~/.ray/auth_token, after which local clusters started by later tests refuse their worker
# nodes (rigs/local_cluster.py). Tests of token mode set it themselves.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def cdk_context() -> dict:
    """The context from cdk.json, which the CLI passes to the app."""
    return json.loads((ROOT / "cdk.json").read_text())["context"]


def new_app(outdir: Path | None = None, **context):
    """An App as app.py creates it (its App props) with the CLI's context and ``context`` on top."""
    import aws_cdk as cdk

    from app import APP_PROPS

    props = {k: v for k, v in APP_PROPS.items() if k != "context"}
    context = {**APP_PROPS["context"], **cdk_context(), **context}
    return cdk.App(context=context, outdir=str(outdir) if outdir else None, **props)


def make_app(env_name: str, outdir: Path | None = None, **extra_context):
    """An App with the CLI's context, built by app.py's own build function."""
    from app import build_app
    from manifests.check import load_checked

    app = new_app(outdir, env=env_name, **extra_context)
    config = load_checked(env_name)
    stacks = build_app(app, config)
    return app, config, stacks


_SYNTH_CACHE: dict[str, tuple] = {}


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory):
    """Synthesize an environment once per session: returns (assembly, config, stacks)."""

    def get(env_name: str):
        if env_name not in _SYNTH_CACHE:
            out = tmp_path_factory.mktemp(f"cdk-{env_name}")
            app, config, stacks = make_app(env_name, out)
            assembly = app.synth()
            _SYNTH_CACHE[env_name] = (assembly, config, stacks)
        return _SYNTH_CACHE[env_name]

    return get


CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"


def checkov_command(directory: Path, *extra: str) -> list[str]:
    """checkov over the CloudFormation templates in ``directory``, as `make gates` runs it."""
    return [
        str(CHECKOV),
        "--directory",
        str(directory),
        "--framework",
        "cloudformation",
        "--quiet",
        "--compact",
        "--skip-download",
        *extra,
    ]


def template_of(stack):
    from aws_cdk.assertions import Template

    return Template.from_stack(stack)


def stack_template_fixtures(stack: str, *envs: str):
    """Module-scoped fixtures named after ``envs``, each (config, Template) of that environment's
    ``stack`` (an attribute of stacks.platform.PlatformStacks): ``dev, prod = stack_template_fixtures(
    "network", "dev", "prod")``."""

    def fixture_for(env: str):
        @pytest.fixture(scope="module", name=env)
        def config_and_template(synthesized):
            _, config, stacks = synthesized(env)
            return config, template_of(getattr(stacks, stack))

        return config_and_template

    return tuple(fixture_for(env) for env in envs)


def skip_reason(error: ArtifactUnavailable) -> str:
    """One line for every test that misses an artifact: the summary when it names this test's
    artifact, else its own line; how the shared test folder would give it; a refused copy's line."""
    summary = missing_summary()
    reason = summary if summary and error.what in summary else str(error)
    if carries(error.what):
        reason += f" {SHARED_HINT}"
    refused = [str(r) for r in SHARED_REFUSED if r.what.split(" ")[0] == error.what.split(" ")[0]]
    return " | ".join([reason, *refused])


# A test that needs a chart, the KubeRay CRDs or helm, where neither the cache (seeded from the
# shared test folder) nor the network has them, is reported skipped with one reason for all:
# `pytest -ra` prints it as one line. Done on the report so that it also covers a module-scoped
# fixture whose failure pytest caches and re-raises.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(ArtifactUnavailable):
        report.outcome = "skipped"
        reason = skip_reason(call.excinfo.value)
        report.longrepr = (__file__, pytest_runtest_makereport.__code__.co_firstlineno, f"Skipped: {reason}")
    return report


# `make test` runs the suite on every core (pytest-xdist, --dist loadgroup). A local Ray cluster
# wants the CPUs it declares, and its health checks and actor calls run on deadlines: two at once
# on a 2-core machine starve each other. Every test that starts one (marked `ray_cluster`, or
# using a fixture that starts one) joins one xdist group: one worker runs them all, in the
# collection order their module- and session-scoped clusters rely on, while the other workers
# run everything else (xdist hands out the largest group first: this one starts at once).
RAY_CLUSTER_GROUP = "ray-cluster"
RAY_CLUSTER_FIXTURES = frozenset({"ray_cluster", "serve_app"})


def starts_a_ray_cluster(item: pytest.Item) -> bool:
    return item.get_closest_marker("ray_cluster") is not None or not RAY_CLUSTER_FIXTURES.isdisjoint(
        getattr(item, "fixturenames", ())
    )


# tryfirst: xdist's own hook (after this one) reads the group marks.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    grouped = [item for item in items if starts_a_ray_cluster(item)]
    for item in grouped:
        if item.get_closest_marker("ray_cluster") is None:
            item.add_marker(pytest.mark.ray_cluster)  # `-m "not ray_cluster"` leaves it out too
        item.add_marker(pytest.mark.xdist_group(RAY_CLUSTER_GROUP))


@pytest.fixture(autouse=True)
def _ray_clusters_start_only_in_their_group(request, monkeypatch):
    """A test outside the group that starts a local cluster in-process fails at once, naming the
    mark, instead of racing the group's cluster for the CPUs."""
    if not starts_a_ray_cluster(request.node):
        from rigs.local_cluster import LocalCluster

        def refuse(self, name, args):
            raise AssertionError(
                f"{request.node.nodeid} starts a local Ray cluster: mark it @pytest.mark.ray_cluster (tests/conftest.py)"
            )

        monkeypatch.setattr(LocalCluster, "_start", refuse)
