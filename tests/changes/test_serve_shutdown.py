"""``vmledger serve`` told to stop ends its change streams (a ``cut`` event, or a WebSocket
close 1013, naming the reason and the position to resume after) instead of waiting for them
for ever, or leaving uvicorn to cut them with 1012 and no position. The one way it does so is
``serving.StreamEndingServer`` awaiting the app's hook before uvicorn's own shutdown."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
from websockets.sync.client import connect

from service.api.app import create_app
from service.api.serving import StreamEndingServer
from tests.changes.live import closed_with, served, sse_events
from tests.changes.scenarios import OWNER_A, create_vm
from tests.cli import vmledger_process
from tests.waiting import wait_until

LISTENERS = 4


@contextmanager
def _serve(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """A ``vmledger serve`` process on SQLite at a free port, and its base URL."""
    log_path = tmp_path / "serve.log"
    process = vmledger_process("serve", "--port", "0", log_path=log_path,
                               database_url=f"sqlite:///{tmp_path / 'v.db'}",
                               env={"VMLEDGER_LOG_FORMAT": "text", "VMLEDGER_SIM_SERVERS": "1"})
    try:
        wait_until(lambda: re.search(r"http://127\.0\.0\.1:\d+", log_path.read_text()),
                   "serve to listen")
        yield process, re.search(r"http://127\.0\.0\.1:\d+", log_path.read_text()).group(0)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_sigterm_ends_open_change_streams_and_serve_exits(tmp_path):
    with _serve(tmp_path) as (process, url), httpx.Client(base_url=url, timeout=30) as client, \
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


def test_sigterm_closes_every_changefeed_listener_with_1013_and_its_position(tmp_path):
    # found by a tester: uvicorn closed the listeners itself (1012, no reason) before the
    # hub, which looked at the server's state once per poll, ended their streams
    registration = {"service": "test", "after": 0,
                    "changeKind": {"resource": "vm", "subResources": ["state"]}}
    with _serve(tmp_path) as (process, url), ExitStack() as stack:
        base = url.replace("http://", "ws://") + "/changefeeds"
        listeners = [stack.enter_context(connect(base)) for _ in range(LISTENERS)]
        for n, ws in enumerate(listeners):
            ws.send(json.dumps({**registration, "instance": f"listener-{n}"}))
            assert json.loads(ws.recv(timeout=10))["resource"] == "vm"  # the bootstrap
        unregistered = stack.enter_context(connect(base))
        wait_until(lambda: httpx.get(url + "/changefeeds/stats").json()["listeners"] == LISTENERS,
                   "every listener to be registered")
        process.send_signal(signal.SIGTERM)
        ends = [closed_with(ws) for ws in listeners]
        for code, reason in ends:
            assert code == 1013
            assert re.fullmatch(r"the service is shutting down; resume after \d+", reason)
        assert closed_with(unregistered) == (1013, "the service is shutting down")
        assert process.wait(timeout=30) == -signal.SIGTERM


def test_the_server_ends_the_streams_through_the_apps_hook_with_no_signal(services):
    # the server runs in a thread, so no signal handler of its own is in play: what ends the
    # streams is its shutdown awaiting the app's hook, and nothing else
    create_vm(services, OWNER_A)
    registration = {"instance": "listener", "service": "test", "after": 0,
                    "changeKind": {"resource": "vm", "subResources": ["state"]}}
    app = create_app(services=services, background=False)
    with served(app, StreamEndingServer) as (url, server), \
            httpx.Client(base_url=url, timeout=30) as client, \
            client.stream("GET", "/changes?after=0") as response, \
            connect(url.replace("http://", "ws://") + "/changefeeds") as listener:
        listener.send(json.dumps(registration))
        assert json.loads(listener.recv(timeout=10))["resource"] == "vm"  # the bootstrap
        events = sse_events(response)
        first = next(e for e in events if e is not None)
        server.should_exit = True
        end = next(e for e in events if e is not None and e.event == "cut")
        assert end.json["reason"] == "the service is shutting down"
        assert end.json["resume_after"] == int(end.id) >= int(first.id)
        code, reason = closed_with(listener)
        assert code == 1013
        assert re.fullmatch(r"the service is shutting down; resume after \d+", reason)
