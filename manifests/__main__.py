"""``python -m manifests render KIND --env NAME``: print a workload's KubeRay manifest (YAML).

The workloads' kinds are the registry's keys (manifests/registry.py: each renders with its own
renderer); the namespace-wide kinds (NetworkPolicies, SecretProviderClasses, disruption budgets)
map to ``module:function`` in ``RENDERERS``, each taking the EnvironmentConfig and returning the
manifest.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import Any

RENDERERS = {
    "network-policies": "manifests.network_policy:render",
    "secret-provider-class": "manifests.security:render_secret_provider_class",
    "gcs-store-secret-provider-class": "manifests.ha:render_secret_provider_class",
    "inference-disruption-budgets": "manifests.disruption_budgets:render_disruption_budgets",
}


def kinds() -> list[str]:
    """Every kind ``render`` knows: the registered workloads' and the namespace-wide ones."""
    from manifests import registry

    return sorted([w.key for w in registry.workloads()] + list(RENDERERS))


def renderer(kind: str) -> tuple[Callable[[Any], dict[str, Any]], Callable[[dict[str, Any]], str] | None]:
    """The renderer of ``kind`` and its own YAML form (None: plain YAML)."""
    from manifests import registry

    for w in registry.workloads():
        if w.key == kind:
            return w.render, w.to_yaml
    module, func = RENDERERS[kind].split(":")
    mod = importlib.import_module(module)
    return getattr(mod, func), getattr(mod, "to_yaml", None)


def _no_alias_dumper() -> type[Any]:
    import yaml

    class NoAliasDumper(yaml.SafeDumper):
        """Objects shared between pod templates are written out in full: kubectl and reviewers
        read plain YAML, and an alias hides which template a value belongs to."""

        def ignore_aliases(self, data: object) -> bool:
            return True

    return NoAliasDumper


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m manifests")
    sub = parser.add_subparsers(dest="command", required=True)
    render = sub.add_parser("render", help="print the RayJob/RayService YAML of a workload")
    render.add_argument("kind", choices=kinds())
    render.add_argument("--env", required=True, help="environment name (config/NAME.yaml)")
    args = parser.parse_args(argv)

    import yaml

    from config import ConfigError, load_environment

    _NoAliasDumper = _no_alias_dumper()

    try:
        cfg = load_environment(args.env)
        fn, to_yaml = renderer(args.kind)
        manifest = fn(cfg)
    except ConfigError as err:
        print(err.render(), file=sys.stderr)
        return 2
    # A renderer may bring its own YAML form (e.g. serveConfigV2 as a readable literal block).
    dump = to_yaml or (lambda m: yaml.dump(m, Dumper=_NoAliasDumper, sort_keys=False, width=1000))
    sys.stdout.write(dump(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
