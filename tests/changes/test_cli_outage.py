"""``vmledger changes --follow`` through an outage: stdout keeps the changes, stderr gets the
command's own one line per outage (docs/api.md, "Changes"), not the service's and the
libraries' log lines (a tester found 4 to 6, one of them spread over 3 lines)."""

from __future__ import annotations

import signal
import subprocess
from urllib.parse import urlsplit

import pytest
from eventsourcing.persistence import OperationalError
from typer.testing import CliRunner

from service.changes import tail as tail_module
from service.cli.app import cli
from tests.changes.scenarios import OWNER_A, OWNER_B, create_vm, log_positions
from tests.cli import VMLEDGER, environment, stop_processes
from tests.integration.outages import database_refused
from tests.waiting import wait_until


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_an_outage_under_follow_writes_one_line_on_stderr(services, database_url, tmp_path):
    """The entry point, its database refused and every connection cut (the LISTEN one, the
    pool's): one ``changes:`` line, then the change appended after the outage."""
    first = create_vm(services, OWNER_A)
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    env = environment({"VMLEDGER_CHANGES_POLL_S": "0.05", "VMLEDGER_DATABASE_RETRY_S": "0.5",
                       "VMLEDGER_LOG_LEVEL": "DEBUG"}, database_url)
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        follower = subprocess.Popen([VMLEDGER, "changes", "--follow", "--after", "0"], env=env,
                                    stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        wait_until(lambda: first in out.read_text(), "the follower to print the first VM",
                   timeout=60, log_path=err)
        printed = len(out.read_text().splitlines())
        with database_refused(urlsplit(database_url).path[1:]):
            wait_until(lambda: "retrying" in err.read_text(), "the follower to meet the outage",
                       log_path=err)
        second = create_vm(services, OWNER_B)
        wait_until(lambda: second in out.read_text(), "the follower to print the second VM",
                   log_path=err)
    finally:
        stop_processes([follower])
    assert follower.returncode == 0, err.read_text()
    [line] = err.read_text().splitlines()
    assert line.startswith(f"changes: reading the log after position "
                           f"{log_positions(services, 0)[printed - 1]} failed ("), line
    assert line.endswith("); retrying"), line
    assert [int(row.split()[0]) for row in out.read_text().splitlines()] == log_positions(
        services, 0)


def test_the_outage_line_is_one_line_whatever_the_error_says(services, settings, monkeypatch):
    """libpq's messages run over lines (``server closed the connection unexpectedly`` then
    a tab and ``This probably means ...``): the command's line keeps the first."""
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    create_vm(services, OWNER_A)
    head = services.commands.head_position()
    read_after, failed = tail_module.LogReader.read_after, []

    def cut_once(reader, after, limit):
        if not failed:
            failed.append(after)
            raise OperationalError("consuming input failed: server closed the connection "
                                   "unexpectedly\n\tThis probably means the server terminated")
        found = read_after(reader, after, limit)
        if found[1] >= head:
            stops[signal.SIGTERM]()  # what a SIGTERM does: everything read, stop following
        return found

    stops = {}
    monkeypatch.setattr(signal, "signal", lambda signum, handler: stops.update({
        signum: lambda: handler(signum, None)}))
    monkeypatch.setattr(tail_module.LogReader, "read_after", cut_once)
    monkeypatch.setattr(tail_module, "FIRST_RETRY_S", 0.0)
    result = CliRunner().invoke(cli, ["changes", "--follow", "--after", "0"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "changes: reading the log after position 0 failed (OperationalError: consuming input "
        "failed: server closed the connection unexpectedly); retrying"]
    assert len(result.stdout.splitlines()) == len(log_positions(services, 0))
