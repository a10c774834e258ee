"""The one way a command is added: a module of ops/commands/ defining ``COMMAND``, listed in
``ops.commands.COMMANDS``; the parser's commands are exactly those, in that order."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

import ops.commands
from ops.cli import build_parser
from ops.context import CommandSpec


def test_every_command_module_is_listed_once_and_is_the_parsers_command():
    modules = sorted(m.name for m in pkgutil.iter_modules(ops.commands.__path__))
    specs = [importlib.import_module(f"ops.commands.{name}").COMMAND for name in modules]
    assert all(isinstance(s, CommandSpec) for s in specs)
    assert sorted(s.name for s in ops.commands.COMMANDS) == sorted(s.name for s in specs) == modules
    sub = next(a for a in build_parser("hpray")._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == [s.name for s in ops.commands.COMMANDS]


def test_each_command_runs_either_locally_or_with_its_environment():
    for spec in ops.commands.COMMANDS:
        assert (spec.run is None) != (spec.run_local is None), spec.name
