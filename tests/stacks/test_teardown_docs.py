"""docs/deploy.md "What production retains" lists exactly the resources of the synthesized prod
templates that carry ``DeletionPolicy: Retain`` (stack, type and fixed name), and no Secrets
Manager secret and nothing of the GCS store is among them (issue 41: a retained store kept the
VPC from being deleted; retained fixed-name tokens made a redeploy with the same prefix fail)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from config.facts.names import stack_prefix

ROOT = Path(__file__).resolve().parents[2]
NAME_PROPERTIES = ("BucketName", "LogGroupName", "Name", "SecretName")


def documented_rows() -> list[tuple[str, str, str | None]]:
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text.split("### What production retains", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("stack", "---"):
            continue
        stack, _, kind, name, _ = cells
        rows.append((stack, kind.strip("`"), None if name == "-" else name.strip("`")))
    return rows


def retained(assembly_dir: Path, prefix: str) -> list[tuple[str, str, str | None]]:
    found = []
    for path in sorted(assembly_dir.glob("*.template.json")):
        stack = path.name.removesuffix(".template.json")
        if not stack.startswith(prefix):
            continue
        for res in json.loads(path.read_text()).get("Resources", {}).values():
            if res.get("DeletionPolicy") == "Retain":
                props = res.get("Properties", {})
                name = next((props[k] for k in NAME_PROPERTIES if isinstance(props.get(k), str)), None)
                found.append((stack.removeprefix(prefix), res["Type"], name))
    return found


def test_the_docs_list_exactly_what_production_retains(synthesized):
    assembly, config, _ = synthesized("prod")
    assert config.production
    values = {
        "<name_prefix>": config.name_prefix,
        "<account>": config.account,
        "<region>": config.region,
        "<eks_cluster>": config.eks_cluster_name,
    }

    def render(name: str | None) -> str | None:
        return name if name is None else re.sub("|".join(map(re.escape, values)), lambda m: values[m[0]], name)

    documented = sorted((stack, kind, render(name)) for stack, kind, name in documented_rows())
    in_templates = sorted(retained(Path(assembly.directory), stack_prefix(config.name_prefix)))
    assert documented == in_templates
    kinds = {kind for _, kind, _ in in_templates}
    assert "AWS::SecretsManager::Secret" not in kinds
    assert not any(kind.startswith("AWS::ElastiCache::") for kind in kinds)
