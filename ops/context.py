"""What every ``hpray`` command runs with: :class:`Command`.

A command reads its environment's config and its parsed arguments, writes to ``out``, and talks to
the world only through the clients here (AWS, the cluster's Kubernetes API, made on demand) and
the clock; tests hand in fakes of those and nothing else.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from config.environment import EnvironmentConfig

if TYPE_CHECKING:
    from ops.submit import FollowOptions

KubeFactory = Callable[[Any, EnvironmentConfig, argparse.Namespace], Any]


@dataclass(frozen=True)
class Command:
    config: EnvironmentConfig
    args: argparse.Namespace
    out: TextIO
    aws: Any
    kube_factory: KubeFactory
    prog: str = "hpray"
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    # ``token_fn(kube, namespace, head_pod)``: the Ray auth token for a head's Jobs API.
    token_fn: Callable[[Any, str, dict[str, Any]], str | None] | None = None

    @property
    def env(self) -> str:
        return self.config.name

    def kube(self) -> Any:
        """A client of the environment's cluster (connects when called)."""
        return self.kube_factory(self.aws, self.config, self.args)

    def follow_options(self, **kwargs: Any) -> FollowOptions:
        """How a submit command follows what it applied (--poll-seconds, --timeout-minutes, --json)."""
        from ops.submit import FollowOptions

        return FollowOptions.from_args(
            self.args, self.out, sleep=self.sleep, clock=self.clock, token_fn=self.token_fn, **kwargs
        )
