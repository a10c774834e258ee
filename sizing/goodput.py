"""The goodput sweep on paper: the share of a training run's wall time that becomes progress,
from the failure rate, the checkpoint interval, a checkpoint's write time, and the time a failure
costs besides the lost work (node replacement, restart, reading the checkpoint back).

First-order model (Young 1974, "A first order approximation to the optimum checkpoint interval",
CACM 17(9); Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart
dumps", FGCS 22(3)): a run alternates ``tau`` seconds of steps with a checkpoint of ``delta``
seconds; failures arrive at rate ``1/M`` (M: the cluster's mean time between failures); each one
costs the downtime ``R`` plus, on average, half a segment of work redone. Expected goodput is
``tau / (tau + delta) * (1 - (R + (tau + delta) / 2) / M)``, and the interval that maximizes it is
``sqrt(2 * delta * M)`` to first order (Young's optimum, Daly's first-order term).

``delta`` is the checkpoint's write time at FSx's throughput (sizing/storage.py). The job saves
asynchronously, so the loop stalls only while a save is staged or when one outlasts the interval:
the write time is an upper bound of the stall, and the goodput a lower bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# An interval this many times shorter or longer than the optimum is "far" from it: there the
# waste (checkpoints plus expected rework) is (k + 1/k) / 2 = 1.67x its minimum or more.
FAR_FACTOR = 3.0


def expected_goodput(interval_s: float, write_s: float, downtime_s: float, mtbf_s: float) -> float:
    """Share of wall time spent on steps that are kept, for checkpoints every ``interval_s``
    seconds of steps that take ``write_s`` each, failures every ``mtbf_s`` on average, each costing
    ``downtime_s`` plus half a segment redone (0 when failures leave no progress)."""
    segment = interval_s + write_s
    return max(0.0, interval_s / segment * (1.0 - (downtime_s + segment / 2.0) / mtbf_s))


def optimal_interval(write_s: float, mtbf_s: float) -> float:
    """Young's and Daly's first-order optimum checkpoint interval, seconds: sqrt(2 delta M)."""
    return math.sqrt(2.0 * write_s * mtbf_s)


@dataclass(frozen=True)
class GoodputSweep:
    """The configured checkpoint interval against the optimum, for one training run."""

    nodes: int
    node_mtbf_hours: float
    mtbf_seconds: float  # the run's: one node's over the nodes it trains on
    downtime_seconds: float  # replacement + restart + reading the checkpoint
    write_seconds: float
    step_seconds: float
    interval_steps: int
    interval_seconds: float
    goodput: float
    optimal_interval_seconds: float
    optimal_steps: int
    optimal_goodput: float
    run_steps: int  # the whole run's steps: an optimum beyond them means one checkpoint, at the end

    @property
    def factor(self) -> float:
        """How many times the configured interval is longer (> 1) or shorter (< 1) than the optimum."""
        return self.interval_seconds / self.optimal_interval_seconds

    @property
    def far(self) -> bool:
        return self.factor > FAR_FACTOR or self.factor < 1 / FAR_FACTOR

    def goodput_at(self, steps: int) -> float:
        """Expected goodput with a checkpoint every ``steps`` steps (the sweep's other points)."""
        return expected_goodput(steps * self.step_seconds, self.write_seconds, self.downtime_seconds, self.mtbf_seconds)


def sweep(
    *,
    nodes: int,
    node_mtbf_hours: float,
    downtime_seconds: float,
    write_seconds: float,
    step_seconds: float,
    interval_steps: int,
    run_steps: int,
) -> GoodputSweep:
    mtbf = node_mtbf_hours * 3600.0 / nodes
    interval = interval_steps * step_seconds
    best = optimal_interval(write_seconds, mtbf)
    best_steps = max(1, round(best / step_seconds))
    return GoodputSweep(
        nodes=nodes,
        node_mtbf_hours=node_mtbf_hours,
        mtbf_seconds=mtbf,
        downtime_seconds=downtime_seconds,
        write_seconds=write_seconds,
        step_seconds=step_seconds,
        interval_steps=interval_steps,
        interval_seconds=interval,
        goodput=expected_goodput(interval, write_seconds, downtime_seconds, mtbf),
        optimal_interval_seconds=best,
        optimal_steps=best_steps,
        optimal_goodput=expected_goodput(best, write_seconds, downtime_seconds, mtbf),
        run_steps=run_steps,
    )


def duration(seconds: float) -> str:
    """``seconds`` as the reader counts them: s below 2 minutes, min below 2 hours, else h."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def warning(s: GoodputSweep) -> str | None:
    """The synth warning when the configured interval is far from the optimum (None otherwise)."""
    if not s.far:
        return None
    way = f"{s.factor:.1f}x longer" if s.factor > 1 else f"{1 / s.factor:.1f}x shorter"
    return (
        f"training.checkpoint_every_steps: {s.interval_steps} steps ({duration(s.interval_seconds)} at an "
        f"estimated {s.step_seconds:.3g} s per step) is {way} than the Young/Daly optimum "
        f"sqrt(2 x {s.write_seconds:.1f} s write x {duration(s.mtbf_seconds)} MTBF of {s.nodes} node"
        f"{'s' if s.nodes != 1 else ''}) = {duration(s.optimal_interval_seconds)} ({s.optimal_steps} steps): "
        f"expected goodput {s.goodput:.2%} against {s.optimal_goodput:.2%} at the optimum"
    )
