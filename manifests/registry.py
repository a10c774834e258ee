"""The workloads the platform runs: one registry, a tuple of frozen ``Workload`` specs.

Each names its key (the render kind of ``python -m manifests render`` and ``hpray submit``, and
its key in the plan), its KubeRay kind, its app label, its plan function (sizing-level: from the
EnvironmentConfig to its plan, the reason it has none, or None where the config does not deploy
it), its renderer and, for a RayService, what it serves. The plan (``plan_of``), the renderers,
the NetworkPolicies, the disruption budgets, the placement and autoscaling checks
(manifests/check.py) and the review read this tuple instead of naming the workloads one by one.

Adding a RayJob workload is its runtime folder (workloads/<name>/, with ``__main__``) and one
entry here; ``manifests.rayjob.renderer`` renders it from its plan (docs/development.md,
"Adding a workload"). ``registered`` runs code with extra workloads, for tests, without changing
this module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

from config.environment import EnvironmentConfig
from config.facts.names import (
    BATCH_INFERENCE_APP,
    EXPORT_APP,
    HEAD_IN_SERVE_SERVICE,
    INFERENCE_APP,
    INFERENCE_DEPLOYMENT,
    LLM_APP,
    PRETOKENIZE_APP,
    SERVE_CLIENT_LABEL,
    SERVE_PORT,
    TRAINING_APP,
)
from manifests import batch_inference, export, inference, pretokenize, training
from manifests import rayjob as rayjob_mod
from sizing import plan as plan_mod
from sizing.plan import JobPlan, Plan, PlanFn, Planners, Unplanned

Render = Callable[[EnvironmentConfig], dict[str, Any]]


@dataclass(frozen=True)
class Serving:
    """What a RayService serves: Serve's HTTP ``port`` on its worker pods (and on the head where
    ``head_serves``: KubeRay's ``excludeHeadPodFromServeSvc`` false), the Serve deployment the
    checks name (None: the app's own, e.g. Serve LLM's), and the namespaces whose pods may reach
    it (labelled ``clients_label=true``)."""

    port: int = SERVE_PORT
    deployment: str | None = None
    clients_label: str = SERVE_CLIENT_LABEL
    head_serves: bool = HEAD_IN_SERVE_SERVICE


@dataclass(frozen=True)
class Workload:
    """One workload of the platform (see the module docstring)."""

    key: str
    kind: Literal["RayJob", "RayService"]
    app: str
    plan: PlanFn
    render: Render
    # The renderer's own YAML form (serveConfigV2 as a literal block); None: plain YAML.
    to_yaml: Callable[[dict[str, Any]], str] | None = None
    serves: Serving | None = None
    # How the review names it ("<title> <kind>") and what its worker pods hold, several a pod.
    title: str = ""
    per_pod: str = "workers"
    # ``hpray submit <key>``'s help line; empty: hpray submit does not offer it.
    submit: str = ""

    @property
    def description(self) -> str:
        return f"{self.title or self.key} {self.kind}"


def rayjob(
    key: str,
    plan: PlanFn,
    *,
    app: str,
    module: str,
    ray_env: Mapping[str, str] | None = None,
    title: str = "",
    per_pod: str = "workers",
    submit: str | None = None,
    args: Callable[[EnvironmentConfig], Sequence[str]] | None = None,
) -> Workload:
    """A RayJob workload rendered from its plan alone (``manifests.rayjob.render_job``): its
    runtime is ``python -m <module>`` (its folder under workloads/), its pods carry app label
    ``app``; ``hpray submit <key>`` offers it with the help line ``submit`` (default: its title;
    "": not offered); ``args``: its command line's arguments from the config (none by default).
    What the registry needs of a new RayJob is this one entry."""

    def render(env: EnvironmentConfig) -> dict[str, Any]:
        w = plan_of(env).workloads.get(key)
        return rayjob_mod.render_job(
            env,
            w if isinstance(w, JobPlan | Unplanned) else None,
            key=key,
            app=app,
            module=module,
            ray_env=ray_env,
            args=args(env) if args is not None else (),
        )

    offered = f"the {title or key} workload: a RayJob" if submit is None else submit
    return Workload(key, "RayJob", app, plan, render, title=title, per_pod=per_pod, submit=offered)


WORKLOADS: tuple[Workload, ...] = (
    Workload(
        plan_mod.TRAINING,
        "RayJob",
        TRAINING_APP,
        plan_mod.training,
        training.render,
        title="training",
        per_pod="Ray Train workers",
        submit="the training workload: a RayJob; an identical job still running is followed, not resubmitted",
    ),
    Workload(
        plan_mod.INFERENCE,
        "RayService",
        INFERENCE_APP,
        plan_mod.inference,
        inference.render,
        inference.to_yaml,
        Serving(deployment=INFERENCE_DEPLOYMENT),
        title="generation",
        per_pod="Serve replicas",
        submit="the inference workload: a RayService; an existing one is updated in place",
    ),
    Workload(
        plan_mod.LLM,
        "RayService",
        LLM_APP,
        plan_mod.llm,
        inference.render_llm,
        inference.to_yaml,
        Serving(),
        title="LLM",
        per_pod="engines",
    ),
    Workload(
        plan_mod.EXPORT,
        "RayJob",
        EXPORT_APP,
        plan_mod.export,
        export.render,
        title="export",
        per_pod="the export",
        # `hpray export` submits it (with --checkpoint STEP), not `hpray submit`.
        submit="",
    ),
    Workload(
        plan_mod.BATCH_INFERENCE,
        "RayJob",
        BATCH_INFERENCE_APP,
        plan_mod.batch_inference,
        batch_inference.render,
        title="batch inference",
        per_pod="vLLM engines",
        submit="the batch inference workload: a RayJob generating over a batch of prompts with vLLM",
    ),
    # The pretokenize job (config's ``pretokenize:``), a generic RayJob with its command line.
    rayjob(
        plan_mod.PRETOKENIZE,
        plan_mod.pretokenize,
        app=PRETOKENIZE_APP,
        module=pretokenize.MODULE,
        title="pretokenize",
        per_pod="tokenizer actors",
        submit="the pretokenize workload: a RayJob that writes the token dataset training.dataset_path reads",
        args=pretokenize.args,
    ),
)


_ACTIVE: ContextVar[tuple[Workload, ...]] = ContextVar("workloads", default=WORKLOADS)


def workloads() -> tuple[Workload, ...]:
    """The registered workloads, in order (``WORKLOADS``, plus any ``registered`` adds)."""
    return _ACTIVE.get()


def get(key: str) -> Workload:
    for w in workloads():
        if w.key == key:
            return w
    raise KeyError(key)


@contextlib.contextmanager
def registered(*extra: Workload) -> Iterator[tuple[Workload, ...]]:
    """Within the block, the registry holds ``extra`` after the built-in workloads (this context
    only: nothing leaks past the block)."""
    keys = [w.key for w in (*_ACTIVE.get(), *extra)]
    if len(set(keys)) != len(keys):
        raise ValueError(f"workload keys must be unique: {keys}")
    token = _ACTIVE.set((*_ACTIVE.get(), *extra))
    try:
        yield _ACTIVE.get()
    finally:
        _ACTIVE.reset(token)


def planners() -> Planners:
    """(key, plan function) of every registered workload: what the plan is derived from."""
    return tuple((w.key, w.plan) for w in workloads())


def plan_of(env: EnvironmentConfig) -> Plan:
    """The plan of ``env`` over the registered workloads (derived once per config and registry)."""
    return plan_mod.plan_of(env, planners())


def deployed(env: EnvironmentConfig) -> list[tuple[Workload, str]]:
    """(workload, its Kubernetes name) of every workload ``env`` deploys, with a plan or not."""
    plan = plan_of(env)
    return [(w, plan.workloads[w.key].name) for w in workloads() if w.key in plan.workloads]
