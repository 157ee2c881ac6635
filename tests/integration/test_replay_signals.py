"""``vmledger replay`` stopped by a signal (docs/replay.md, "Stopping a replay"): SIGTERM to
the process (``kill PID``) or SIGINT to its process group (^C at a terminal) ends it with one
line saying it was stopped, what the database holds and what to do next, status 128 + the
signal, nothing else on stderr (before: no line at all, and on SIGTERM multiprocessing's
"resource_tracker: There appear to be 6 leaked semaphore objects"), and the database it
leaves passes ``vmledger audit verify``."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.cli import VMLEDGER, environment, vmledger
from tests.trace import SCHEDULE, SUBMIT, row, write_trace
from tests.waiting import wait_until

# long runs of real processes: .ci/slow.sh runs them, the default run leaves them out
pytestmark = pytest.mark.slow


def long_trace(path: Path, jobs: int = 3_000) -> Path:
    """A trace that takes a replay some seconds: 3 tasks a job, each submitted then placed."""
    return write_trace(path, [
        row(event, job=str(job), index=str(index),
            machine=str(index + 1) if event == SCHEDULE else "")
        for job in range(jobs) for index in range(3) for event in (SUBMIT, SCHEDULE)])


def events_in(database: Path) -> int:
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT count(*) FROM stored_events").fetchone()[0]
    except sqlite3.Error:
        return 0  # not created yet


@pytest.mark.parametrize("signum, to_group", [(signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["SIGTERM to the process", "SIGINT to its group (^C)"])
def test_a_replay_stopped_by_a_signal_says_so_and_leaves_a_log_that_verifies(
        tmp_path, signum, to_group) -> None:
    database = tmp_path / "vmledger.db"
    url = f"sqlite:///{database}"
    trace = long_trace(tmp_path / "t.csv.gz")
    replay = subprocess.Popen([VMLEDGER, "replay", str(trace)], env=environment(None, url),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        wait_until(lambda: events_in(database) > 200 or replay.poll() is not None,
                   "the replay's first appends", timeout=60)
        assert replay.poll() is None, "the trace was replayed before the signal"
        if to_group:
            os.killpg(replay.pid, signum)
        else:
            replay.send_signal(signum)
        stdout, stderr = replay.communicate(timeout=60)
    finally:
        if replay.poll() is None:
            os.killpg(replay.pid, signal.SIGKILL)
            replay.wait()
    assert replay.returncode == 128 + signum, stderr
    assert stdout == ""
    # the progress bar writes on stderr too (not a terminal: no redrawing, no line of its own)
    said = [line for line in stderr.splitlines() if line.startswith("vmledger replay:")]
    assert len(said) == 1 and said[0].startswith(
        f"vmledger replay: stopped by {signal.Signals(signum).name}: the log holds its first "
        f"{events_in(database):,} events, whole appends in order"), stderr
    assert "cannot be resumed" in said[0] and "audit verify" in said[0], said
    assert "leaked" not in stderr and "Traceback" not in stderr, stderr
    verified = vmledger("audit", "verify", database_url=url)
    assert verified.returncode == 0, verified.stdout + verified.stderr
