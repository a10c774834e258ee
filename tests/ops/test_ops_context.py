"""The context every command runs with: its clients are made on demand and its seams reach the follower."""

from __future__ import annotations

import argparse
import io

from config import parse_environment
from ops.context import Command
from tests.ops.fakes import env_data


def test_kube_is_made_from_the_commands_aws_config_and_args_when_asked():
    config = parse_environment(env_data("dev"), source="test")
    args = argparse.Namespace(poll_seconds=2.0, timeout_minutes=3, json=False)
    calls = []
    command = Command(config, args, io.StringIO(), "aws", lambda *a: calls.append(a) or "kube")
    assert calls == []
    assert command.kube() == "kube"
    assert calls == [("aws", config, args)]
    assert command.env == config.name


def test_follow_options_carry_the_flags_and_the_commands_seams():
    config = parse_environment(env_data("dev"), source="test")
    args = argparse.Namespace(poll_seconds=2.0, timeout_minutes=3, json=False)
    out = io.StringIO()

    def sleep(s: float) -> None:
        pass

    def token_fn(kube, namespace, pod):
        return "t"

    command = Command(config, args, out, None, lambda *a: None, sleep=sleep, clock=lambda: 1.0, token_fn=token_fn)
    options = command.follow_options(total_steps=7)
    assert (options.poll_s, options.timeout_s, options.total_steps) == (2.0, 180, 7)
    # Not a terminal: JSON lines, no live display.
    assert (options.json_mode, options.live, options.out) == (True, False, out)
    assert (options.sleep, options.token_fn, options.clock()) == (sleep, token_fn, 1.0)
