"""``python -m manifests render KIND --env NAME``: print a workload's KubeRay manifest (YAML).

Each kind maps to ``module:function`` taking the EnvironmentConfig and returning the manifest;
registering a workload is one line in RENDERERS.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

RENDERERS = {
    "training": "manifests.training:render",
    "inference": "manifests.inference:render",
    "inference-llm": "manifests.inference:render_llm",
    "network-policies": "manifests.network_policy:render",
    "secret-provider-class": "manifests.security:render_secret_provider_class",
    "gcs-store-secret-provider-class": "manifests.ha:render_secret_provider_class",
    "inference-disruption-budgets": "manifests.ha:render_disruption_budgets",
}


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
    render.add_argument("kind", choices=sorted(RENDERERS))
    render.add_argument("--env", required=True, help="environment name (config/NAME.yaml)")
    args = parser.parse_args(argv)

    import yaml

    from config import ConfigError, load_environment

    _NoAliasDumper = _no_alias_dumper()

    module, func = RENDERERS[args.kind].split(":")
    try:
        cfg = load_environment(args.env)
        mod = importlib.import_module(module)
        manifest = getattr(mod, func)(cfg)
    except ConfigError as err:
        print(err.render(), file=sys.stderr)
        return 2
    # A module may bring its own YAML form (e.g. serveConfigV2 as a readable literal block).
    dump = getattr(mod, "to_yaml", None) or (lambda m: yaml.dump(m, Dumper=_NoAliasDumper, sort_keys=False, width=1000))
    sys.stdout.write(dump(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
