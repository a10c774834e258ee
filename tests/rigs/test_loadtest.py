"""rigs/loadtest.in_background: the rehearsals' "kill once N requests finished"."""

from __future__ import annotations

import itertools
import threading

from rigs import loadtest


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


def test_the_retry_policy_is_the_official_openai_clients():
    from openai import _constants

    assert loadtest.RETRIES == _constants.DEFAULT_MAX_RETRIES
    assert loadtest.FIRST_RETRY_DELAY_S == _constants.INITIAL_RETRY_DELAY
    assert loadtest.MAX_RETRY_DELAY_S == _constants.MAX_RETRY_DELAY


def test_a_5xx_is_retried_after_a_backoff_and_counted_as_retried():
    """A server on 127.0.0.1 that answers 500 twice, then serves: the request succeeds on its
    second retry, at least 0.5 s and then 1 s after the failures."""
    import json
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(time.monotonic())
            ok = len(seen) > 2
            body = json.dumps({"usage": {"completion_tokens": 3}} if ok else {"error": "replica died"}).encode()
            self.send_response(200 if ok else 500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/completions"
        res = loadtest.run(url, requests=1, concurrency=1, time_limit_s=30, retry=True)
    finally:
        server.shutdown()
    (record,) = res.records
    assert (record.status, record.tokens, record.retried) == (200, 3, True)
    gaps = [b - a for a, b in itertools.pairwise(seen)]
    assert len(seen) == 3 and gaps[0] >= 0.5 and gaps[1] >= 1.0, gaps
