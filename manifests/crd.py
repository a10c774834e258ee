"""Offline, strict validation of rendered KubeRay manifests against the real KubeRay CRDs.

The schemas are `spec.versions[v1].schema.openAPIV3Schema` of the KubeRay CRDs of the pinned
operator release (``artifacts.pinned.kuberay_crd_dir``: a verified copy fetched at the pinned
commit and cached). jsonschema checks
types, enums and required fields; because the schemas do not forbid extra keys, unknown fields
are found by walking the manifest alongside the schema, as kubectl's strict field validation
does.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

_FILES = {
    "RayJob": "ray.io_rayjobs.yaml",
    "RayService": "ray.io_rayservices.yaml",
    "RayCluster": "ray.io_rayclusters.yaml",
}
# Keys every Kubernetes object may have that the CRD schema leaves open.
_OBJECT_META = {"name", "namespace", "labels", "annotations", "generateName", "finalizers", "ownerReferences"}


@functools.cache
def schema(kind: str) -> dict[str, Any]:
    """The v1 openAPIV3Schema of ``kind`` (loaded once; each file takes ~2 s to parse)."""
    from artifacts.pinned import kuberay_crd_dir

    # Raises artifacts.pinned.ArtifactUnavailable (one line: what is missing, how to get it).
    path = kuberay_crd_dir() / _FILES[kind]
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    schema: dict[str, Any] = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    return schema


def unknown_fields(value: Any, node: dict[str, Any], where: str = "") -> list[str]:
    """Paths in ``value`` that the schema ``node`` does not declare."""
    out: list[str] = []
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return out
    if isinstance(value, dict):
        props = node.get("properties")
        addl = node.get("additionalProperties")
        for key, sub in value.items():
            path = f"{where}.{key}" if where else key
            if props is not None and key in props:
                out += unknown_fields(sub, props[key], path)
            elif isinstance(addl, dict):
                out += unknown_fields(sub, addl, path)
            elif props is not None or addl is False:
                if where == "metadata" and key in _OBJECT_META:
                    continue
                out.append(path)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for i, item in enumerate(value):
            out += unknown_fields(item, node["items"], f"{where}[{i}]")
    return out


def validate(manifest: dict[str, Any]) -> list[str]:
    """Every problem with ``manifest`` (empty: valid), each naming the field path."""
    import jsonschema

    kind = manifest.get("kind")
    if kind not in _FILES:
        return [f"kind: {kind!r} is not one of {', '.join(_FILES)}"]
    if manifest.get("apiVersion") != "ray.io/v1":
        return [f"apiVersion: {manifest.get('apiVersion')!r}; expected 'ray.io/v1'"]
    s = schema(kind)
    problems = [f"unknown field {p}" for p in unknown_fields(manifest, s)]
    validator = jsonschema.Draft7Validator(s)
    for err in sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.path))):
        path = ".".join(str(p) for p in err.absolute_path) or "<root>"
        problems.append(f"{path}: {err.message}")
    return problems
