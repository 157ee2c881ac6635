"""The long-running processes log an outage's warnings (docs/operations.md, "Logs": "their
warnings are for the long-running processes"): ``vmledger serve`` (in its HTTP processes,
``--workers 2`` here), ``work`` and ``project``, each started through the console script as an
operator starts it. Before, ``main`` set the outage loggers to ERROR for every command and
``setup_logging`` left them so: ``project`` losing its ``LISTEN`` connection, the pools
reconnecting and a retry given up logged nothing. (The one-shot commands still leave them
out: tests/service/test_command_warnings.py, tests/changes/test_cli_outage.py.)"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from service.logs import OUTAGE_NOISE
from tests.cli import stop_processes, vmledger_process
from tests.integration.outages import database_refused
from tests.integration.processes import _answers, _has_tables, free_port
from tests.waiting import wait_until

# long runs of real processes: .ci/slow.sh runs them, the default run leaves them out
pytestmark = pytest.mark.slow


def outage_warnings(log_path: Path) -> list[dict]:
    """The WARNING lines of ``OUTAGE_NOISE``'s loggers in a process's JSON log."""
    found = []
    for line in log_path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # not a log line (none is expected, but the test is about warnings)
        if entry.get("level") == "WARNING" and any(
                entry["logger"] == name or entry["logger"].startswith(name + ".")
                for name in OUTAGE_NOISE):
            found.append(entry)
    return found


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_serve_work_and_project_log_an_outages_warnings(database_url, tmp_path) -> None:
    env = {"VMLEDGER_EMBEDDED_RUNNERS": "false", "VMLEDGER_LOG_FORMAT": "json",
           "VMLEDGER_PROJECTION_POLL_S": "0.05", "VMLEDGER_WORKER_POLL_S": "0.05",
           "VMLEDGER_TOKENS": None, "VMLEDGER_TOKENS_FILE": None}
    logs = {name: tmp_path / f"{name}.log" for name in ("project", "serve", "work")}
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    processes = [vmledger_process("project", log_path=logs["project"], env=env,
                                  database_url=database_url)]
    try:
        wait_until(lambda: _has_tables(database_url), "the schema", timeout=60,
                   log_path=logs["project"])
        processes.append(vmledger_process("serve", "--port", str(port), "--workers", "2",
                                          log_path=logs["serve"], env=env,
                                          database_url=database_url))
        processes.append(vmledger_process("work", log_path=logs["work"], env=env,
                                          database_url=database_url))
        wait_until(lambda: _answers(base_url), "the API", timeout=60, log_path=logs["serve"])

        def requests() -> set[int]:  # new connections each: both HTTP processes get some
            with ThreadPoolExecutor(8) as pool:
                return set(pool.map(lambda _: _status(f"{base_url}/vms"), range(32)))

        assert requests() == {200}  # every HTTP process's pool holds connections
        with database_refused(urlsplit(database_url).path[1:]):
            for name in ("project", "work"):
                wait_until(lambda: outage_warnings(logs[name]), f"{name}'s outage warning",
                           timeout=30, log_path=logs[name])
            wait_until(lambda: requests() and outage_warnings(logs["serve"]),
                       "an HTTP process's outage warning", timeout=30, log_path=logs["serve"])
    finally:
        stop_processes(processes)


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=10).status_code
    except httpx.HTTPError:
        return 0
