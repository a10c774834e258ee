"""The deploy-time commands over an environment's config and plan:

    python -m manifests render KIND --env NAME [--config-dir DIR]   # a workload's KubeRay manifest (YAML)
    python -m manifests check ENV [ENV...]         # the placement table and sizing row; exit 1 on a config error
    python -m manifests train --env NAME [--set KEY=VALUE ...]   # the training job with the plan's settings

``check`` runs in `make synth` (every pod fits its node pool, the autoscaler sees every demand,
FSx takes the checkpoint burst, over the registry's plan: manifests/check.py). ``train`` runs the
training job on the Ray cluster this process reaches with the settings the RayJob would carry.

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
from pathlib import Path
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


# The environments' folder: --config-dir, else $HPRAY_CONFIG_DIR (as hpray), else config/.
CONFIG_DIR_ENV = "HPRAY_CONFIG_DIR"


def config_dir(given: Path | None) -> Path:
    import os

    from config.loader import CONFIG_DIR, known_environments

    chosen = given or (Path(os.environ[CONFIG_DIR_ENV]) if os.environ.get(CONFIG_DIR_ENV) else None)
    if chosen is None:
        return CONFIG_DIR
    flag = "--config-dir" if given else f"${CONFIG_DIR_ENV}"
    if not chosen.is_dir() or not known_environments(chosen):
        raise SystemExit(f"error: {flag} {chosen}: no environment file (NAME.yaml) in it")
    return chosen


def check(names: list[str], folder: Path | None = None) -> int:
    """Each environment's placement table, sizing row and checkpoint-interval warning; 1 with the
    errors of the first that does not pass its checks."""
    from config import ConfigError
    from manifests import registry
    from manifests.check import load_checked
    from sizing import placement, storage
    from sizing.plan import checkpoint_interval_warning

    for name in names:
        try:
            env = load_checked(name, config_dir(folder))
        except ConfigError as err:
            print(err.render(), file=sys.stderr)
            return 1
        plan = registry.plan_of(env)
        print(placement.render_table(env, plan))
        row = storage.table_row(env.name, plan.checkpoint)
        print(
            f"Sizing of {env.name} (docs/reference/sizing.md): "
            + "; ".join(f"{h} {v}" for h, v in zip(storage.TABLE_HEADERS[1:], row[1:], strict=True))
        )
        warning = checkpoint_interval_warning(env, plan)
        if warning:
            print(f"warning: {warning}")
    return 0


def train(env_name: str, sets: list[str], folder: Path | None = None) -> int:
    """The training job with ``env_name``'s plan settings (and ``sets``) on the reachable cluster."""
    import logging

    from config import ConfigError
    from manifests.check import load_checked
    from manifests.training import for_cluster
    from workloads.training import settings as S
    from workloads.training.__main__ import run_settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        s = for_cluster(load_checked(env_name, config_dir(folder)), S.parse_overrides(sets))
    except ConfigError as err:
        print(err.render(), file=sys.stderr)
        return 2
    return run_settings(s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m manifests")
    sub = parser.add_subparsers(dest="command", required=True)
    render = sub.add_parser("render", help="print the RayJob/RayService YAML of a workload")
    render.add_argument("kind", choices=kinds())
    render.add_argument("--env", required=True, help="environment name (config/NAME.yaml)")
    check_cmd = sub.add_parser("check", help="the placement and sizing of environments (make synth)")
    check_cmd.add_argument("envs", nargs="+", metavar="ENV")
    train_cmd = sub.add_parser("train", help="run the training job with an environment's plan settings")
    train_cmd.add_argument("--env", required=True, help="environment name (config/NAME.yaml)")
    train_cmd.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a training setting"
    )
    for p in (render, check_cmd, train_cmd):
        p.add_argument(
            "--config-dir",
            type=Path,
            metavar="DIR",
            help=f"folder of the environment files NAME.yaml (default: ${CONFIG_DIR_ENV}, else config/)",
        )
    args = parser.parse_args(argv)
    if args.command == "check":
        return check(args.envs, args.config_dir)
    if args.command == "train":
        return train(args.env, args.set, args.config_dir)

    import yaml

    from config import ConfigError, load_environment

    _NoAliasDumper = _no_alias_dumper()

    try:
        cfg = load_environment(args.env, config_dir(args.config_dir))
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
