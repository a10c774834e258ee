"""Synth benchmark: every environment (all gates that run inside synth: cdk-nag AwsSolutions and
NIST 800-53 R5) against a minimal one-bucket CDK app synthesized the same way, as ratios
measured in one run; plus a 100-instance-group config against a 2-group one.

Two baselines, both with app.py's App props (no stack traces; no construct tree, which nothing
reads; CDK's built-in CloudFormation validation off because cfn-lint is the template gate), its
garbage collector settings (off from the start, `gc.freeze()` after synth) and cdk.json's context:
- "1 bucket + gates": the one-bucket app with the same cdk-nag packs registered (its nine
  findings acknowledged, so every rule still runs). This is "synthesized the same way": the
  ratio is what our platform costs on top of the same synth pipeline.
- "1 bucket": no cdk-nag at all; loading and running the packs is then on our side of the ratio.
Each synth is a fresh `python app.py` process (what `cdk synth` runs), so importing aws-cdk-lib
and starting the jsii kernel are in every measurement: that is the floor. Runs are interleaved
(every case once per round, each round starting one case later) and the median is taken, so that
drift on a noisy machine hits both sides alike; every synth starts with an empty output
directory, as `make synth` does. Peak memory is the largest resident set of the whole process tree (Python plus
the jsii Node kernel), sampled every 20 ms.

Bytecode is the same for every case. By default (``--bytecode cached``) each synth reads and
writes compiled modules in one cache of the run's own (``PYTHONPYCACHEPREFIX``, with
``PYTHONDONTWRITEBYTECODE`` unset), and one untimed synth of every case fills it first: what a
developer's second `make synth` costs. Otherwise a shell with ``PYTHONDONTWRITEBYTECODE=1`` would
compile the platform's ~70 modules (and the aws-cdk-lib modules no earlier synth cached in the
venv: the synth install skips byte-compiling) from source in every synth, while the baseline's
few modules are already cached: not synthesized the same way. ``--bytecode as-is`` keeps the
shell's settings and the venv's caches (a CI job that sets ``PYTHONDONTWRITEBYTECODE``).

    .venv/bin/python bench/synth_bench.py [--repeats 3] [--bytecode cached|as-is]
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workloads.common import procfs  # noqa: E402

BARE = "baseline: 1 bucket"
GATED = "baseline: 1 bucket + gates"

# The one-bucket app, with the same App props as app.py. GATES is replaced by the line that
# registers the same cdk-nag packs as app.py (constructs.compliance), or by nothing.
BASELINE_APP = """
import gc
gc.disable()  # as app.py does before its imports
import sys
sys.path.insert(0, {root!r})
import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
app = cdk.App(**{props!r})
stack = cdk.Stack(app, "Baseline", env=cdk.Environment(account="111111111111", region="us-east-1"))
bucket = s3.Bucket(stack, "Bucket")
{gates}
app.synth()
import gc
gc.freeze()  # as app.py does after synth
"""
# The bare bucket breaks nine rules; acknowledging them keeps every rule evaluated (the gates'
# cost is what is measured) while letting the baseline synthesize.
BARE_BUCKET_FINDINGS = (
    "AwsSolutions-S1",
    "AwsSolutions-S10",
    "NIST.800.53.R5-S3BucketLoggingEnabled",
    "NIST.800.53.R5-S3BucketPublicReadProhibited",
    "NIST.800.53.R5-S3BucketPublicWriteProhibited",
    "NIST.800.53.R5-S3BucketReplicationEnabled",
    "NIST.800.53.R5-S3BucketSSLRequestsOnly",
    "NIST.800.53.R5-S3BucketVersioningEnabled",
    "NIST.800.53.R5-S3DefaultEncryptionKMS",
)
GATES = (
    "from constructs.compliance import acknowledge, register_compliance_checks\n"
    f"acknowledge(bucket, *[(f, 'Benchmark baseline: a bare bucket, to measure the cost of the gates') "
    f"for f in {BARE_BUCKET_FINDINGS!r}])\n"
    "register_compliance_checks(app)"
)


def app_props() -> dict[str, Any]:
    """app.py's APP_PROPS, read from its source: importing app.py would import the whole platform
    into the baseline."""
    tree = ast.parse((ROOT / "app.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "APP_PROPS" for t in node.targets):
            props: dict[str, Any] = ast.literal_eval(node.value)
            return props
    raise SystemExit("app.py has no APP_PROPS literal")


def _tree_rss_kib(pid: int) -> int:
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        total += procfs.rss_kib(p)
        stack.extend(procfs.children(p))
    return total


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, peak MiB) of one synth process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_kib(proc.pid))
        time.sleep(0.02)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        stderr = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"synth failed: {' '.join(argv)}\n{stderr[-3000:]}")
    return wall, peak / 1024


def synth_env(env_name: str, outdir: Path, config_dir: Path | None = None) -> dict[str, str]:
    context = json.loads((ROOT / "cdk.json").read_text())["context"] | {"env": env_name}
    if config_dir:
        context["config_dir"] = str(config_dir)
    return {
        **os.environ,
        "PATH": f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ['PATH']}",
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
        "CDK_OUTDIR": str(outdir),
        "CDK_CONTEXT_JSON": json.dumps(context),
    }


def groups_config(config_dir: Path, n_groups: int) -> None:
    """dev.yaml with ``n_groups`` instance groups: its own groups as they are (the training job,
    the services and the placement checks name them), then one-node copies of the first, each
    with a label of its own so that no workload's selector picks one up."""
    data = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    groups = data["hyperpod"]["instance_groups"]
    if n_groups < len(groups):
        raise SystemExit(
            f"instance groups: {n_groups}; dev.yaml already has {len(groups)}, allowed: {len(groups)} or more"
        )
    template = groups[0]
    for i in range(len(groups), n_groups):
        g = copy.deepcopy(template)
        g["name"] = f"bench-{i:03d}"
        g["instance_count"] = 1
        g["labels"] = {"workload": f"bench-{i:03d}"}
        groups.append(g)
    (config_dir / f"groups{n_groups}.yaml").write_text(yaml.safe_dump(data))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bytecode", choices=("cached", "as-is"), default="cached")
    args = parser.parse_args()
    py = sys.executable
    work = Path(tempfile.mkdtemp(prefix="synth-bench-"))
    baseline_script = work / "baseline_app.py"
    baseline_script.write_text(BASELINE_APP.format(root=str(ROOT), props=app_props(), gates=""))
    gated_script = work / "baseline_gated_app.py"
    gated_script.write_text(BASELINE_APP.format(root=str(ROOT), props=app_props(), gates=GATES))
    config_dir = work / "config"
    config_dir.mkdir()
    for n in (2, 100):
        groups_config(config_dir, n)

    cases: dict[str, tuple[list[str], dict[str, str]]] = {
        BARE: ([py, str(baseline_script)], synth_env("dev", work / "out-baseline")),
        GATED: ([py, str(gated_script)], synth_env("dev", work / "out-baseline-gated")),
    }
    for env_name in ("dev", "staging", "prod"):
        cases[env_name] = ([py, "app.py"], synth_env(env_name, work / f"out-{env_name}"))
    for n in (2, 100):
        cases[f"{n} instance groups"] = ([py, "app.py"], synth_env(f"groups{n}", work / f"out-g{n}", config_dir))

    if args.bytecode == "cached":
        for _, env in cases.values():
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    # One untimed synth of every case: the bytecode cache and the page cache hold what it reads.
    for argv, env in cases.values():
        shutil.rmtree(env["CDK_OUTDIR"], ignore_errors=True)
        measure(argv, env)
    print(f"[warm-up done] bytecode: {args.bytecode}", file=sys.stderr, flush=True)

    results: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    total = args.repeats * len(cases)
    done = 0
    names = list(cases)
    for r in range(args.repeats):
        # Each round starts one case later, so that no case always runs right after the same one.
        for name in names[r % len(names) :] + names[: r % len(names)]:
            argv, env = cases[name]
            # Every synth writes into an empty output directory, as `make synth` does (CDK skips
            # copying an asset that is already staged there), and the previous one's writes are
            # on disk before the next starts (untimed).
            shutil.rmtree(env["CDK_OUTDIR"], ignore_errors=True)
            os.sync()
            results[name].append(measure(argv, env))
            done += 1
            print(f"[{done}/{total}] round {r + 1}: {name}: {results[name][-1][0]:.2f} s", file=sys.stderr, flush=True)

    med = {k: (statistics.median(w for w, _ in v), max(m for _, m in v)) for k, v in results.items()}
    bare, gated = med[BARE][0], med[GATED][0]
    print(
        f"\nSynth benchmark, median of {args.repeats} interleaved runs, one process per synth, "
        f"bytecode {args.bytecode}, load average {os.getloadavg()[0]:.2f} at the end"
    )
    print(f"{'case':<28}{'wall s':>9}{'peak MiB':>10}{'x bare':>9}{'x gated':>9}")
    for name, (wall, mem) in med.items():
        print(f"{name:<28}{wall:>9.2f}{mem:>10.0f}{wall / bare:>8.2f}x{wall / gated:>8.2f}x")
    g2, g100 = med["2 instance groups"][0], med["100 instance groups"][0]
    print(f"\n100 groups vs 2 groups: {g100 / g2:.3f}x ({(g100 / g2 - 1) * 100:+.1f} %; goal < +10 %)")
    envs = ("dev", "staging", "prod")
    peak = max(med[e][1] for e in envs)
    print(
        f"worst environment vs the one-bucket app with the same gates: "
        f"{max(med[e][0] / gated for e in envs):.2f}x (goal <= 2.0x)"
    )
    print(f"worst environment vs the bare one-bucket app (no cdk-nag):    {max(med[e][0] / bare for e in envs):.2f}x")
    print(f"peak memory {peak:.0f} MiB (goal < 1024)")


if __name__ == "__main__":
    main()
