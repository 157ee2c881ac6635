"""What ``vmledger serve`` logs of the changefeed's WebSocket upgrades: one ``vmledger.access``
line each, with its path and status, as an HTTP request gets, and never the URL's query (where
a listener's token is) nor its ``Authorization`` header, at any level, in either format
(docs/operations.md, "Logs"). uvicorn logged every upgrade itself, its query and token
included (``"WebSocket /changefeeds?token=…" [accepted]``), and at DEBUG websockets' trace
of the handshake, its ``Authorization`` header included (a tester)."""

from __future__ import annotations

import hashlib
import json
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from websockets.sync.client import connect

from tests.changes.live import refused_upgrade
from tests.changes.test_triton import V1
from tests.cli import vmledger_process
from tests.waiting import wait_until

# real `serve` processes, each started and stopped: CI runs it with the slow tests
pytestmark = pytest.mark.slow

TOKEN = "a-listeners-token-0123456789abcdef"


@contextmanager
def _serve(tmp_path: Path, log_format: str, log_level: str) -> Iterator[tuple[str, Path]]:
    """A ``vmledger serve`` on SQLite at a free port with one operator token (``TOKEN``):
    its ``ws://`` base URL and its log, complete once the block ends (the process stopped)."""
    tokens_file = tmp_path / "tokens.toml"
    tokens_file.write_text('[[tokens]]\nname = "listener"\nrole = "operator"\n'
                           f'sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"\n')
    log_path = tmp_path / "serve.log"
    process = vmledger_process(
        "serve", "--port", "0", log_path=log_path,
        database_url=f"sqlite:///{tmp_path / 'v.db'}",
        env={"VMLEDGER_LOG_FORMAT": log_format, "VMLEDGER_LOG_LEVEL": log_level,
             "VMLEDGER_TOKENS_FILE": str(tokens_file), "VMLEDGER_TOKENS": None})
    try:
        found = wait_until(lambda: re.search(r"http://(127\.0\.0\.1:\d+) with",
                                             log_path.read_text()),
                           "serve to listen", log_path=log_path)
        yield f"ws://{found.group(1)}", log_path
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _access_lines(log: str, log_format: str) -> list[tuple[str, int]]:
    """(path, status) of each ``vmledger.access`` line of ``log``."""
    if log_format == "json":
        return [(entry["path"], entry["status"]) for entry in map(json.loads, log.splitlines())
                if entry["logger"] == "vmledger.access"]
    return [(path, int(status)) for path, status in re.findall(
        r" vmledger\.access: GET (\S+) (\d+) ", log)]


@pytest.mark.parametrize("log_format, log_level", [
    ("text", "INFO"), ("json", "INFO"), ("json", "DEBUG"), ("text", "DEBUG")])
def test_an_upgrade_logs_one_access_line_and_never_its_query_or_token(
        tmp_path, log_format, log_level):
    with _serve(tmp_path, log_format, log_level) as (base, log_path):
        with connect(f"{base}/changefeeds?token={TOKEN}&after=0") as listener:
            listener.send(json.dumps(V1))
            assert json.loads(listener.recv(timeout=10))["resource"] == "vm"
        with connect(f"{base}/changefeeds",
                     additional_headers={"Authorization": f"Bearer {TOKEN}"}) as listener:
            listener.send(json.dumps(V1))
            assert json.loads(listener.recv(timeout=10))["resource"] == "vm"
        assert refused_upgrade(f"{base}/changefeeds?token=x{TOKEN}").status_code == 401
        assert refused_upgrade(f"{base}/changefeeds?token={TOKEN}&foo=1").status_code == 409
        assert refused_upgrade(f"{base}/nope?token={TOKEN}").status_code == 404
    log = log_path.read_text()
    if log_format == "json":
        assert all(json.loads(line) for line in log.splitlines())
    assert TOKEN not in log
    assert "token=" not in log and "?after" not in log and "&foo" not in log
    assert '"WebSocket ' not in log  # uvicorn's own line of each upgrade
    assert _access_lines(log, log_format) == [
        ("/changefeeds", 101), ("/changefeeds", 101), ("/changefeeds", 401),
        ("/changefeeds", 409), ("/nope", 404)]
