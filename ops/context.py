"""What every ``hpray`` command is and runs with: :class:`CommandSpec` and :class:`Command`.

Each module of ops/commands/ is one command verb and defines one :class:`CommandSpec` as
``COMMAND``; ops/commands/__init__.py lists them and ops/cli.py registers and runs them from that
list (the only way a command is added).

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
    from ops.submit.follow import FollowOptions
    from ops.usage import CommandLine

KubeFactory = Callable[[Any, EnvironmentConfig, argparse.Namespace], Any]
# ``render_fn(workload, config)``: the manifest ``submit training|inference`` applies.
RenderFn = Callable[[str, EnvironmentConfig], dict[str, Any]]


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
    # The workload renderer of ``submit`` (default: ops/submit/render.py).
    render_fn: RenderFn | None = None

    @property
    def env(self) -> str:
        return self.config.name

    def kube(self) -> Any:
        """A client of the environment's cluster (connects when called)."""
        return self.kube_factory(self.aws, self.config, self.args)

    def follow_options(self, **kwargs: Any) -> FollowOptions:
        """How a submit command follows what it applied (--poll-seconds, --timeout-minutes, --json)."""
        from ops.submit.follow import FollowOptions

        return FollowOptions.from_args(
            self.args, self.out, sleep=self.sleep, clock=self.clock, token_fn=self.token_fn, **kwargs
        )


@dataclass(frozen=True)
class CommandSpec:
    """One command verb as ops/cli.py registers and runs it. The steps, in order:

    - ``register(subparsers, command_line)``: add the command's parser (options, help, examples).
    - ``run_local(args, out, parser)``: a command that needs no environment (no ``--env``, no
      client: ``images``, ``completion``) runs here and nothing below.
    - ``check(config, args, prog)``: what the parser cannot check, before any client is made
      (raises UsageError: exit 2).
    - ``dry_run(config, args, out, render_fn)``: with ``--dry-run``, the run without any client.
    - ``run(command)``: the run with the environment and its clients; returns the exit code.
    """

    name: str
    register: Callable[[Any, CommandLine], None]
    run: Callable[[Command], int] | None = None
    run_local: Callable[[argparse.Namespace, TextIO, argparse.ArgumentParser], int] | None = None
    check: Callable[[EnvironmentConfig, argparse.Namespace, str], None] | None = None
    dry_run: Callable[[EnvironmentConfig, argparse.Namespace, TextIO, RenderFn | None], int] | None = None
