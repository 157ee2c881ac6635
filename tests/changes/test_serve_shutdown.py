"""``vmledger serve`` told to stop ends its change streams (a ``cut`` event naming the reason
and the position to resume after) instead of waiting for them for ever."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx

from tests.changes.live import sse_events, until


def test_sigterm_ends_open_change_streams_and_serve_exits(tmp_path):
    log_path = tmp_path / "serve.log"
    env = {**os.environ, "VMLEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'v.db'}",
           "VMLEDGER_LOG_FORMAT": "text", "VMLEDGER_SIM_SERVERS": "1"}
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "service", "serve", "--port", "0"], env=env, stdout=log,
            stderr=subprocess.STDOUT)
    try:
        until(lambda: re.search(r"http://127\.0\.0\.1:\d+", log_path.read_text()),
              "serve to listen")
        url = re.search(r"http://127\.0\.0\.1:\d+", log_path.read_text()).group(0)
        with httpx.Client(base_url=url, timeout=30) as client, \
                client.stream("GET", "/changes?after=0") as response:
            events = sse_events(response)
            first = next(e for e in events if e is not None)
            assert first.event == "Registered"
            process.send_signal(signal.SIGTERM)
            started = time.monotonic()
            end = next(e for e in events if e is not None and e.event == "cut")
        assert "shutting down" in end.json["reason"]
        assert end.json["resume_after"] == int(end.id) >= int(first.id)
        assert process.wait(timeout=30) == -signal.SIGTERM
        assert time.monotonic() - started < 15
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
