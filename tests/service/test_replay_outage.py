"""A database outage during ``vmledger replay`` ends the command with one line saying what
happened and what to do next, and a non-zero status; not three chained tracebacks (tester B,
B12). The replay's own bugs keep their traceback."""

from __future__ import annotations


import pytest
from eventsourcing.persistence import OperationalError
from psycopg_pool import PoolTimeout
from typer.testing import CliRunner

import service.replay.run
from service.cli.app import cli
from service.replay.commands import ReplayAppendFailedError
from tests.trace import SUBMIT, row, write_trace


def _outage(*_args, **_kwargs):
    # what the replay raised when its database was dropped under it
    try:
        try:
            raise PoolTimeout("couldn't get a connection after 1.00 sec")
        except PoolTimeout as timeout:
            raise OperationalError("couldn't get a connection after 1.00 sec") from timeout
    except OperationalError as error:
        raise ReplayAppendFailedError(f"a replayed append failed: {error}") from error


@pytest.fixture
def replay(tmp_path, monkeypatch):
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", f"sqlite:///{tmp_path / 'r.db'}")
    monkeypatch.setenv("VMLEDGER_SIM_SERVERS", "1")
    trace = write_trace(tmp_path / "t.csv.gz", [row(SUBMIT, cpu="0.01", mem="0.01")])

    def invoke(*options: str):
        return CliRunner().invoke(cli, ["replay", str(trace), *options])
    return invoke


@pytest.mark.parametrize("follow", ["--follow", "--no-follow"])
def test_a_database_outage_during_a_replay_ends_with_one_line(replay, monkeypatch, follow):
    monkeypatch.setattr(service.replay.run, "replay_and_catch_up", _outage)
    monkeypatch.setattr(service.replay.run, "replay", _outage)
    result = replay(follow)
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    [line] = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith("vmledger replay: the database failed during the replay")
    assert "couldn't get a connection" in line
    assert "empty database" in line and "Traceback" not in result.output


def test_a_replay_bug_that_is_no_database_error_keeps_its_traceback(replay, monkeypatch):
    def bug(*_args, **_kwargs):
        raise ReplayAppendFailedError("a replayed append failed: duplicate stream")

    monkeypatch.setattr(service.replay.run, "replay_and_catch_up", bug)
    result = replay()
    assert isinstance(result.exception, ReplayAppendFailedError)
