"""Recovery from a worker-node loss: seconds from the SIGKILL of a whole worker node to the
first training step after the resume, and the steps redone, with Ray's default node-loss
detection and with the faster detection the rehearsal uses, measured in one run. The path is
the rehearsal's same-size one by default (a fixed-size run whose lost node's replacement joins at
once); ``--path shrink`` measures the elastic run that continues on fewer workers after
``--replacement-wait-s``.

Each case is a full rehearsal (rigs/rehearse_train.py) on free ports, so it never
touches another cluster on the machine.

    python bench/training_recovery.py [--cases fast,default] [--steps 200] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    from rigs.rehearse_train import PATHS, rehearse

    p = argparse.ArgumentParser()
    p.add_argument("--cases", default="fast,default")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--kill-at-step", type=int, default=80)
    p.add_argument("--path", choices=list(PATHS), default="same-size")
    p.add_argument(
        "--workers",
        type=int,
        default=4,
        help="Ray Train workers over the rehearsal's 2 worker nodes (2: one per node; the shrink path needs 4)",
    )
    p.add_argument("--replacement-wait-s", type=int, default=10, help="training.replacement_wait_s (shrink path)")
    p.add_argument(
        "--ray-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment of every Ray process, e.g. RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=1",
    )
    p.add_argument("--out", default=str(REPO / "out" / "bench" / "training_recovery.json"))
    args = p.parse_args(argv)
    ray_env = dict(pair.split("=", 1) for pair in args.ray_env)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; Ray env {ray_env or 'defaults'}", flush=True)
    results = {}
    for case in args.cases.split(","):
        print(f"==> {case} node-loss detection, {args.path} path", flush=True)
        s = rehearse(
            steps=args.steps,
            checkpoint_every=args.checkpoint_every,
            kill_at_step=args.kill_at_step,
            out_dir=Path(args.out).parent / f"recovery-{case}",
            detection=case,
            gcs_port=None,
            dashboard_port=None,
            quiet=True,
            ray_env=ray_env,
            replacement_wait_s=args.replacement_wait_s if args.path == "shrink" else None,
            num_workers=args.workers,
            **PATHS[args.path],  # type: ignore[arg-type]
        )
        results[case] = s
        print(
            f"    status {s['status']}: recovery {s['recovery_s']} s (goal <= 15 s), steps redone "
            f"{s['steps_redone']} (goal <= {args.checkpoint_every}), final loss {s['final_loss']}",
            flush=True,
        )
        for k, v in s["phases"].items():
            print(f"      {k:55s} {v}", flush=True)
    if (
        "fast" in results
        and "default" in results
        and results["fast"]["recovery_s"]
        and results["default"]["recovery_s"]
    ):
        print(
            f"recovery with fast detection / Ray defaults: "
            f"{results['fast']['recovery_s'] / results['default']['recovery_s']:.2f}"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    import signal

    # `timeout` sends SIGTERM: exit through the finally blocks, so the local cluster is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
