"""The commands of ``hpray``, one module per command verb, in the order of ``hpray --help``.

Each module defines ``COMMAND``, an ops/context.py :class:`~ops.context.CommandSpec`: its name,
how it registers its parser and how it runs. ops/cli.py registers and runs the commands from
:data:`COMMANDS` and nothing else: a new command is a module here and a line below. A command's
module imports what it runs on (ops/clients/, ops/submit/, ops/jobs/, ops/reports/,
ops/upgrade/) inside its functions, so ``--help`` and a usage error load none of it.
"""

from __future__ import annotations

from ops.commands import (
    completion,
    dashboard,
    describe,
    endpoint,
    env,
    export,
    images,
    jobs,
    logs,
    pods,
    preflight,
    resume,
    rollout,
    status,
    stop,
    submit,
    teardown,
    upgrade,
)
from ops.context import CommandSpec

COMMANDS: tuple[CommandSpec, ...] = (
    preflight.COMMAND,
    status.COMMAND,
    submit.COMMAND,
    jobs.COMMAND,
    describe.COMMAND,
    pods.COMMAND,
    logs.COMMAND,
    stop.COMMAND,
    resume.COMMAND,
    export.COMMAND,
    dashboard.COMMAND,
    rollout.COMMAND,
    endpoint.COMMAND,
    upgrade.COMMAND,
    teardown.COMMAND,
    images.COMMAND,
    env.COMMAND,
    completion.COMMAND,
)
BY_NAME: dict[str, CommandSpec] = {spec.name: spec for spec in COMMANDS}
