"""Wall time and peak memory of one make target, as the pipeline's synth host would run it.

Peak memory is the largest resident set of the whole process tree (make, the CDK CLI, Python,
the jsii Node kernel, cfn-lint, checkov, the review), summed over the tree and sampled every
20 ms, the same way as bench/synth_bench.py. Every dependency must already be installed (the
target's stamps up to date), so that only the target's own commands are measured.

    .venv/bin/python bench/make_bench.py pipeline
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.synth_bench import _tree_rss_kib  # noqa: E402


def measure(target: str) -> tuple[float, float, float]:
    """(wall seconds, peak MiB of the process tree, CPU seconds of the tree) of ``make TARGET``."""
    start = time.perf_counter()
    before = os.times()
    proc = subprocess.Popen(["make", "--no-print-directory", target], cwd=ROOT)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_kib(proc.pid))
        time.sleep(0.02)
    wall = time.perf_counter() - start
    after = os.times()
    if proc.returncode != 0:
        raise SystemExit(f"make {target} failed (exit {proc.returncode})")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, peak / 1024, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="the make target, e.g. pipeline")
    args = parser.parse_args()
    wall, peak, cpu = measure(args.target)
    print(f"make {args.target}: wall {wall:.0f} s, peak RSS of the process tree {peak:.0f} MiB, CPU {cpu:.0f} s")


if __name__ == "__main__":
    main()
