"""workloads/inference/loadtest.in_background: the rehearsals' "kill once N requests finished"."""

from __future__ import annotations

import threading

from workloads.inference import loadtest


def test_returns_once_the_count_is_reached_while_the_load_goes_on():
    go_on = threading.Event()

    def load(on_count):
        for n in range(1, 6):
            on_count(n)
        go_on.wait(10)
        return "done"

    th, result = loadtest.in_background(load, until=3)
    assert th.is_alive() and result == {}
    go_on.set()
    th.join(10)
    assert result == {"r": "done"}


def test_a_load_that_ends_first_leaves_a_finished_thread():
    th, result = loadtest.in_background(lambda on_count: on_count(2) or "short", until=5)
    th.join(10)
    assert not th.is_alive() and result == {"r": "short"}
