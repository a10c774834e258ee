"""``hpray export``: the export RayJob of the environment's training run (the registry's export
workload), with ``--checkpoint STEP`` passed on as the export's ``--step``; ``--dry-run`` prints
it without a client."""

from __future__ import annotations

import io
import json
import shlex

from config import load_environment
from manifests import export, registry
from ops.cli import main


def _dry_run(*argv: str) -> dict:
    out, err = io.StringIO(), io.StringIO()
    assert main(["export", "--env", "prod", "--dry-run", "--json", *argv], out=out, err=err, prog="hpray") == 0
    return json.loads(out.getvalue())


def test_dry_run_prints_the_export_rayjob_of_the_run():
    env = load_environment("prod")
    job = _dry_run()
    assert job == registry.get("export").render(env)
    args = shlex.split(job["spec"]["entrypoint"])
    assert args[:3] == ["python", "-m", "workloads.export"]
    t = env.training
    storage = t.resolved_storage_path(env.fsx.file_system_path)
    assert (
        args[3:]
        == export.arguments(env)
        == [
            "--storage",
            storage,
            "--run-name",
            t.run_name,
            "--out",
            t.resolved_export_path(env.fsx.file_system_path),
            "--tokenizer",
            t.tokenizer,
            "--max-shard-bytes",
            str(export.MAX_SHARD_BYTES),
            "--replace",
        ]
    )
    # Its entrypoint runs on its head: no worker pods.
    assert job["spec"]["rayClusterSpec"]["workerGroupSpecs"] == []


def test_a_checkpoint_step_is_the_exports_step():
    args = shlex.split(_dry_run("--checkpoint", "12000")["spec"]["entrypoint"])
    assert args[-2:] == ["--step", "12000"]
