"""Read a cloud assembly directory: stacks (also those of nested Stage assemblies), their
templates, and the construct metadata CDK writes beside them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ASSET_MANIFEST = "cdk:asset-manifest"
STACK_ARTIFACT = "aws:cloudformation:stack"
NESTED_ASSEMBLY = "cdk:cloud-assembly"
LOGICAL_ID = "aws:cdk:logicalId"
ACKNOWLEDGED = "aws:cdk:acknowledged-rules"


class AssemblyError(Exception):
    """The directory is not a readable cloud assembly."""


@dataclass(frozen=True)
class Resource:
    logical_id: str
    type: str
    properties: dict[str, Any]
    raw: dict[str, Any]
    path: str | None  # construct path, when the metadata names it

    @property
    def deletion_policy(self) -> str:
        return self.raw.get("DeletionPolicy", "Delete")

    @property
    def checkov_skips(self) -> list[dict[str, str]]:
        return list(((self.raw.get("Metadata") or {}).get("checkov") or {}).get("skip") or [])


@dataclass(frozen=True)
class Acknowledgement:
    stack: str
    path: str
    rule: str
    reason: str
    resources: tuple[str, ...]


@dataclass
class Stack:
    """One ``aws:cloudformation:stack`` artifact."""

    artifact_id: str
    display_name: str
    group: str  # the environment: Environment tag, else the Stage (nested assembly), else the stack
    account: str
    region: str
    termination_protection: bool
    tags: dict[str, str]
    template: dict[str, Any]
    metadata: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # The Docker image assets `cdk deploy` publishes before this stack (its asset manifest's
    # ``dockerImages``): asset hash -> {"source": ..., "destinations": ...}.
    docker_images: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Identifies the stack across two assemblies."""
        return self.display_name

    def resources(self) -> list[Resource]:
        paths = self.paths_by_logical_id()
        return [
            Resource(lid, r.get("Type", "?"), r.get("Properties") or {}, r, paths.get(lid))
            for lid, r in (self.template.get("Resources") or {}).items()
        ]

    def resource(self, logical_id: str) -> Resource | None:
        for r in self.resources():
            if r.logical_id == logical_id:
                return r
        return None

    def paths_by_logical_id(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for path, entries in self.metadata.items():
            for e in entries:
                if e.get("type") == LOGICAL_ID and isinstance(e.get("data"), str):
                    out[e["data"]] = path
        return out

    def acknowledgements(self) -> list[Acknowledgement]:
        """cdk-nag/validation acknowledgements (``Validations.of(c).acknowledge``): CDK records
        them as ``aws:cdk:acknowledged-rules`` entries on the acknowledging construct's path in
        the stack's metadata file."""
        by_path = self.paths_by_logical_id()
        acks: list[Acknowledgement] = []
        for path, entries in sorted(self.metadata.items()):
            for e in entries:
                if e.get("type") != ACKNOWLEDGED or not isinstance(e.get("data"), dict):
                    continue
                covered = tuple(sorted(lid for lid, p in by_path.items() if p == path or p.startswith(path + "/")))
                for rule, reason in sorted(e["data"].items()):
                    acks.append(Acknowledgement(self.display_name, path, rule.split("::", 1)[-1], str(reason), covered))
        return acks


@dataclass
class Assembly:
    directory: Path
    stacks: list[Stack]

    def groups(self) -> dict[str, list[Stack]]:
        out: dict[str, list[Stack]] = {}
        for s in self.stacks:
            out.setdefault(s.group, []).append(s)
        return out

    def stack(self, key: str) -> Stack | None:
        return next((s for s in self.stacks if s.key == key), None)

    def exports(self) -> dict[str, tuple[Stack, Any]]:
        """Export name -> (stack, the output's value), for following Fn::ImportValue."""
        out: dict[str, tuple[Stack, Any]] = {}
        for s in self.stacks:
            for o in (s.template.get("Outputs") or {}).values():
                name = (o.get("Export") or {}).get("Name")
                if isinstance(name, str):
                    out[name] = (s, o.get("Value"))
        return out


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise AssemblyError(f"{path}: missing; is this a cloud assembly (run cdk synth first)?") from None
    except json.JSONDecodeError as err:
        raise AssemblyError(f"{path}: not valid JSON ({err})") from None


def load_assembly(directory: str | Path) -> Assembly:
    root = Path(directory)
    if not (root / "manifest.json").is_file():
        raise AssemblyError(f"{root}: no manifest.json; expected a cloud assembly directory such as cdk.out")
    stacks: list[Stack] = []
    _collect(root, None, stacks)
    return Assembly(root, stacks)


def _collect(directory: Path, stage: str | None, out: list[Stack]) -> None:
    manifest = _read_json(directory / "manifest.json")
    artifacts = manifest.get("artifacts") or {}
    for artifact_id, art in sorted(artifacts.items()):
        kind = art.get("type")
        props = art.get("properties") or {}
        if kind == NESTED_ASSEMBLY:
            _collect(directory / props["directoryName"], artifact_id.removeprefix("assembly-"), out)
        elif kind == STACK_ARTIFACT:
            template = _read_json(directory / props["templateFile"])
            metadata = dict(art.get("metadata") or {})
            extra = art.get("additionalMetadataFile")
            if extra:
                for path, entries in _read_json(directory / extra).items():
                    metadata.setdefault(path, []).extend(entries)
            env = art.get("environment", "aws://unknown-account/unknown-region")
            account, _, region = env.removeprefix("aws://").partition("/")
            tags = dict(props.get("tags") or {})
            # Reports are per environment: the Environment tag, else the Stage, else the stack.
            group = tags.get("Environment") or stage or art.get("displayName") or artifact_id
            out.append(
                Stack(
                    artifact_id=artifact_id,
                    display_name=art.get("displayName") or artifact_id,
                    group=group,
                    account=account,
                    region=region,
                    termination_protection=bool(props.get("terminationProtection")),
                    tags=tags,
                    template=template,
                    metadata=metadata,
                    docker_images=_docker_images(directory, artifacts, art),
                )
            )


def _docker_images(directory: Path, artifacts: dict[str, Any], stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``dockerImages`` of the asset manifests ``stack`` depends on (CDK publishes them first)."""
    out: dict[str, dict[str, Any]] = {}
    for dep in stack.get("dependencies") or []:
        art = artifacts.get(dep) or {}
        if art.get("type") == ASSET_MANIFEST:
            out.update(_read_json(directory / art["properties"]["file"]).get("dockerImages") or {})
    return out
