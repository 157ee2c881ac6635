"""What a replay stopped by a signal says, by how far it had got (docs/replay.md, "Stopping a
replay"), and that its advice is right: the same command run next does what it said.

The signal is a real SIGINT, raised in this process at the point of the replay each test
picks (``signal.raise_signal`` runs the command's handler before it returns), so every phase
is reached without timing a process (tests/integration/test_replay_signals.py runs whole
processes). A tester stopped a replay during its read models' catch-up, after every row had
been replayed, and was told to drop the database and replay it all again."""

from __future__ import annotations

import signal
from collections import Counter

import pytest
from typer.testing import CliRunner

import service.replay.run
from service.cli.app import cli
from service.container import Services
from service.replay.replayer import Replayer
from tests.builders import rows
from tests.trace import KILL, SCHEDULE, SUBMIT, row, write_trace

ROWS = [row(SUBMIT), row(SCHEDULE, machine="1"), row(SUBMIT, index="1"), row(KILL, index="1")]
FINAL_STATES = Counter(running=1, destroyed=1)


def interrupt() -> None:
    """^C, here and now: the replay's handler raises its stop before this returns."""
    signal.raise_signal(signal.SIGINT)
    raise AssertionError("the SIGINT did not stop the replay")


@pytest.fixture
def replay_again(settings, tmp_path, monkeypatch):
    """``vmledger replay TRACE --no-follow`` (or with ``--follow``) on the test's database,
    in this process: a function of the options, returning click's result."""
    trace = write_trace(tmp_path / "t.csv", ROWS)
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("COLUMNS", "400")  # the stop's line on one line

    def run(*options: str):
        return CliRunner().invoke(cli, ["replay", str(trace), *options])

    return run


def said(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("vmledger replay:")]
    assert len(lines) == 1, result.output
    return lines[0]


def view_states(settings) -> Counter[str]:
    services = Services.build(settings, register_fleet=False)
    try:
        return Counter(vm["state"] for vm in rows(services, "vm_view"))
    finally:
        services.close()


@pytest.mark.parametrize("follow", ["--follow", "--no-follow"])
def test_a_replay_stopped_in_its_catch_up_says_the_log_is_whole(
        settings, replay_again, monkeypatch, follow):
    with monkeypatch.context() as patched:
        patched.setattr(service.replay.run, "catch_up", lambda *_a, **_k: interrupt())
        stopped = replay_again(follow)
    assert stopped.exit_code == 130, stopped.output
    line = said(stopped)
    assert "after every row of the trace was replayed" in line, line
    assert "the log holds the whole replay" in line and "nothing to replay again" in line
    assert "cannot be resumed" not in line and "drop" not in line, line
    # nothing to replay again: the same command is refused; a rebuild brings the models up
    # (``project``, the runner that runs until stopped, would too)
    again = replay_again("--no-follow")
    assert again.exit_code == 2 and "already has VMs" in again.output, again.output
    rebuilt = CliRunner().invoke(cli, ["rebuild"])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert view_states(settings) == FINAL_STATES


def stop_at_row(patched: pytest.MonkeyPatch, number: int) -> None:
    """Stop the replay as it takes its ``number``-th row (1 the first)."""
    apply = Replayer.apply

    def applying(self, line, fields):
        if self.summary.rows_read + 1 == number:
            interrupt()
        apply(self, line, fields)

    patched.setattr(Replayer, "apply", applying)


def test_a_replay_stopped_before_it_appended_anything_says_to_run_it_again(
        settings, replay_again, monkeypatch):
    with monkeypatch.context() as patched:
        stop_at_row(patched, 1)
        stopped = replay_again("--no-follow")
    assert stopped.exit_code == 130, stopped.output
    line = said(stopped)
    assert "before anything of the trace was replayed" in line, line
    assert "Run the same command again on this database" in line, line
    assert "cannot be resumed" not in line, line
    again = replay_again("--no-follow", "--json")
    assert again.exit_code == 0, again.output
    assert view_states(settings) == FINAL_STATES


def test_a_replay_stopped_midway_says_it_cannot_be_resumed(settings, replay_again,
                                                           monkeypatch):
    with monkeypatch.context() as patched:
        stop_at_row(patched, 3)  # the first VM's rows replayed
        stopped = replay_again("--no-follow")
    assert stopped.exit_code == 130, stopped.output
    line = said(stopped)
    assert "the log holds its first" in line and "cannot be resumed" in line, line
    assert "drop and create the database" in line, line
    again = replay_again("--no-follow")  # what it said: this database will not do
    assert again.exit_code == 2 and "already has VMs" in again.output, again.output
