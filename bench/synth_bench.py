"""Synth benchmark: every environment (all gates that run inside synth: cdk-nag AwsSolutions and
NIST 800-53 R5) against a minimal one-bucket CDK app synthesized the same way, as ratios
measured in one run; plus a 100-instance-group config against a 2-group one.

Both sides use the same App props (app.py's APP_PROPS: no stack traces, CDK's built-in
CloudFormation validation off because cfn-lint is the template gate). Each synth is a fresh
`python app.py` process (what `cdk synth` runs), so importing aws-cdk-lib
and starting the jsii kernel are in every measurement: that is the floor. Runs are interleaved
(baseline, env, baseline, env, ...) and the median is taken, so that drift on a noisy machine hits
both sides alike. Peak memory is the largest resident set of the whole process tree (Python plus
the jsii Node kernel), sampled every 20 ms.

    .venv/bin/python bench/synth_bench.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

BASELINE_APP = """
import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
app = cdk.App(stack_traces=False, builtin_cloud_formation_validation=False,
              context={"aws:cdk:disable-creation-stack-traces": True})
stack = cdk.Stack(app, "Baseline", env=cdk.Environment(account="111111111111", region="us-east-1"))
s3.Bucket(stack, "Bucket")
app.synth()
"""


def _tree_rss_kib(pid: int) -> int:
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
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
        raise SystemExit(f"synth failed: {' '.join(argv)}\n{proc.stderr.read().decode()[-3000:]}")
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
    data = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    template = data["hyperpod"]["instance_groups"][0]
    groups = []
    for i in range(n_groups):
        g = copy.deepcopy(template)
        g["name"] = f"group-{i:03d}"
        g["instance_count"] = 1
        groups.append(g)
    data["hyperpod"]["instance_groups"] = groups
    (config_dir / f"groups{n_groups}.yaml").write_text(yaml.safe_dump(data))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    py = sys.executable
    work = Path(tempfile.mkdtemp(prefix="synth-bench-"))
    baseline_script = work / "baseline_app.py"
    baseline_script.write_text(BASELINE_APP)
    config_dir = work / "config"
    config_dir.mkdir()
    for n in (2, 100):
        groups_config(config_dir, n)

    cases: dict[str, tuple[list[str], dict[str, str]]] = {
        "baseline (1 bucket)": ([py, str(baseline_script)], synth_env("dev", work / "out-baseline")),
    }
    for env_name in ("dev", "staging", "prod"):
        cases[env_name] = ([py, "app.py"], synth_env(env_name, work / f"out-{env_name}"))
    for n in (2, 100):
        cases[f"{n} instance groups"] = ([py, "app.py"], synth_env(f"groups{n}", work / f"out-g{n}", config_dir))

    results: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    total = args.repeats * len(cases)
    done = 0
    for r in range(args.repeats):
        for name, (argv, env) in cases.items():
            results[name].append(measure(argv, env))
            done += 1
            print(f"[{done}/{total}] round {r + 1}: {name}: {results[name][-1][0]:.2f} s", file=sys.stderr, flush=True)

    med = {k: (statistics.median(w for w, _ in v), max(m for _, m in v)) for k, v in results.items()}
    base_wall, base_mem = med["baseline (1 bucket)"]
    print(f"\nSynth benchmark, median of {args.repeats} interleaved runs, one process per synth")
    print(f"{'case':<22}{'wall s':>9}{'peak MiB':>10}{'x baseline':>12}")
    for name, (wall, mem) in med.items():
        print(f"{name:<22}{wall:>9.2f}{mem:>10.0f}{wall / base_wall:>11.2f}x")
    g2, g100 = med["2 instance groups"][0], med["100 instance groups"][0]
    print(f"\n100 groups vs 2 groups: {g100 / g2:.3f}x ({(g100 / g2 - 1) * 100:+.1f} %; goal < +10 %)")
    worst = max(med[e][0] / base_wall for e in ("dev", "staging", "prod"))
    peak = max(med[e][1] for e in ("dev", "staging", "prod"))
    print(f"worst environment ratio: {worst:.2f}x (goal <= 2.0x); peak memory {peak:.0f} MiB (goal < 1024)")


if __name__ == "__main__":
    main()
