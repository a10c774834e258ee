"""Run the training job on the Ray cluster this process can reach.

    python -m workloads.training --local --storage DIR [--set ...]     # tiny model, CPU workers
    python -m workloads.training --settings-json '{...}'               # as the RayJob renders it

With an environment's placement (its plan, which lives with the deploy-time tools, not in the
image): ``python -m manifests train --env prod [--set steps=1000 ...]`` from a checkout.

Every input is checked before Ray starts; a bad one prints what is wrong and exits with 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from config.job_settings import JobSettings


def settings_from_args(argv: list[str] | None = None) -> JobSettings:
    from pydantic import ValidationError

    from config import ConfigError
    from config.job_settings import JobSettings
    from config.loader import format_validation_error
    from workloads.training import settings as S

    parser = argparse.ArgumentParser(prog="python -m workloads.training")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--local", action="store_true", help="tiny model on CPU workers")
    mode.add_argument("--settings-json", help="exact JobSettings as JSON (what the RayJob passes)")
    parser.add_argument("--storage", help="storage path or s3:// URI (with --local)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a training setting (model.n_layer=4, steps=100, ...)",
    )
    args = parser.parse_args(argv)
    overrides = S.parse_overrides(args.set)
    if args.settings_json:
        data = json.loads(args.settings_json)
        try:
            return JobSettings(**{**data, **overrides})
        except ValidationError as err:
            raise ConfigError("--settings-json", format_validation_error(err, root=JobSettings)) from None
    if not args.storage:  # --local: the group is required
        raise ConfigError("command line", ["--storage: required with --local (a directory or s3:// URI)"])
    return S.for_local(overrides, storage_path=args.storage)


def main(argv: list[str] | None = None) -> int:
    from config import ConfigError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        s = settings_from_args(argv)
    except ConfigError as err:
        print(err.render(), file=sys.stderr)
        return 2
    return run_settings(s)


def run_settings(s: JobSettings) -> int:
    """Run the job with ``s`` on the Ray cluster this process reaches: 0 when it finished, 1 when
    it failed, 2 when the cluster cannot run it."""
    import ray

    from config import ConfigError
    from workloads.training.job import check_cluster, run

    ray.init(logging_level=logging.WARNING)
    problems = check_cluster(s)
    if problems:
        print(ConfigError("cluster check", problems).render(), file=sys.stderr)
        return 2
    result = run(s)
    if result.error:
        print(f"TRAIN failed: {result.error}", file=sys.stderr)
        return 1
    assert result.metrics is not None, "a run that ended without an error has reported metrics"
    print(
        f"TRAIN finished step={result.metrics.get('step')} loss={result.metrics.get('loss'):.4f} "
        f"checkpoint={result.checkpoint.path if result.checkpoint else None}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
