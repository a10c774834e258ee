"""The one seam between the CLI and the workload renderers: ``render(kind, config) -> dict``.

The workloads and their renderers come from the one registry, ``manifests/registry.py``, which
``python -m manifests render`` uses too, so ``submit`` applies exactly what the workload tests
validate against the KubeRay CRDs. The renderers import neither Ray nor torch (a test checks
it), so the CLI stays light.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from config.environment import EnvironmentConfig
from ops.errors import OpsError

Renderer = Callable[[EnvironmentConfig], dict[str, Any]]


def workloads() -> dict[str, str]:
    """``key -> KubeRay kind`` of every registered workload (manifests.registry)."""
    from manifests import registry

    return {w.key: w.kind for w in registry.workloads()}


def renderers() -> dict[str, Renderer | str]:
    """``key -> renderer`` (a function, or ``"module:function"``) of every registered workload."""
    from manifests import registry

    return {w.key: w.render for w in registry.workloads()}


def render(kind: str, config: EnvironmentConfig) -> dict[str, Any]:
    known = workloads()
    if kind not in known:
        raise OpsError(f"unknown workload {kind!r}; allowed: {', '.join(known)}")
    target = renderers().get(kind)
    if target is None:
        raise OpsError(
            f"no {kind} manifest renderer is registered (manifests.registry)",
            "merge the workload branch that provides it",
        )
    if callable(target):
        fn = target
    else:
        module_name, _, function = target.partition(":")
        try:
            fn = getattr(importlib.import_module(module_name), function)
        except (ImportError, AttributeError) as err:
            raise OpsError(f"the {kind} manifest renderer {target} cannot be loaded: {err}") from None
    manifest = fn(config)
    if manifest.get("kind") != known[kind] or not (manifest.get("metadata") or {}).get("name"):
        raise OpsError(
            f"the {kind} renderer returned a {manifest.get('kind')!r} without a name; expected a named {known[kind]}"
        )
    return manifest


def deployed_image(
    kube: Any, config: EnvironmentConfig, emit: Callable[[str], None] | None = None, *, team: bool = False
) -> str:
    """The workloads image this environment deployed: the URI the cluster stack wrote into the
    ConfigMap of the workloads namespace (manifests.image.DEPLOYED_CONFIGMAP), never a hash of the
    files beside this command. A team's member (``team``) may read nothing of that namespace (nor
    may their Role read ConfigMaps): for them, the image of the checkout at hand, said through
    ``emit``, else an error naming --image."""
    from manifests import image
    from manifests.k8s import NAMESPACE
    from ops.errors import ClusterAccessError, NotFoundError

    where = f"ConfigMap {NAMESPACE}/{image.DEPLOYED_CONFIGMAP}"
    fix = (
        "deploy the cluster stack of this version (cdk deploy), or name an image: training.image in the "
        "environment file, or --image URI for submit job (the cluster stack's output WorkloadsImageUri)"
    )

    def from_checkout(why: str) -> str:
        root = image.checkout_root()
        if root is None:
            raise OpsError(f"cannot read the deployed workloads image ({where}): {why}", fix)
        if emit is not None:
            emit(f"image: computed from the checkout at {root} ({where}: {why})")
        return image.image_uri(config.account, config.region, root)

    if team:
        return from_checkout("a team's access does not read it")
    try:
        data = kube.read_config_map(NAMESPACE, image.DEPLOYED_CONFIGMAP)
    except NotFoundError:
        data = {}
    except ClusterAccessError as err:
        return from_checkout(err.message)
    uri = data.get(image.DEPLOYED_KEY)
    if not uri:
        raise OpsError(
            f"environment {config.name}: the cluster has no {where} with the deployed workloads image "
            f"({image.DEPLOYED_KEY})",
            fix,
        )
    return uri


def with_deployed_image(config: EnvironmentConfig, uri: str) -> EnvironmentConfig:
    """``config`` whose workloads run ``uri`` where the environment file names no image of its own
    (inference.image falls back to training.image)."""
    if config.training.image is not None:
        return config
    return config.model_copy(update={"training": config.training.model_copy(update={"image": uri})})


def set_image(manifest: dict[str, Any], uri: str) -> None:
    """Every container of a RayJob's head and worker groups runs ``uri``."""
    spec = manifest["spec"].get("rayClusterSpec") or manifest["spec"]
    groups = [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
    for group in groups:
        for container in group["template"]["spec"]["containers"]:
            container["image"] = uri
