"""A ``vmledger rebuild --processes 2`` stopped in the middle: a signal (SIGTERM, SIGINT,
SIGHUP) ends it in one line, status 128 + the signal, its child stopped first; a parent
killed outright (SIGKILL) takes its child with it. Tester: SIGTERM ended the parent and left
the child building past the rebuild's lock, so the next rebuild raced it (a deadlock on
projection_tracking, or "another runner moved the position past 0 first")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli import environment, vmledger
from tests.waiting import wait_until

# real rebuild processes and their children, signalled: CI runs them with the slow tests
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie nobody reaped has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.fixture
def blocked(database_url: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A rebuild in two processes (tests/projections/blocked_rebuild.py) whose child has
    started and blocks: the parent's process and the child's pid."""
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [sys.executable, "-m", "tests.projections.blocked_rebuild"], cwd=ROOT, text=True,
        env=environment({"VMLEDGER_TEST_CHILD_PID": str(pid_file), "VMLEDGER_SIM_SERVERS": "1"},
                        database_url),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: pid_file.exists() or parent.poll() is not None, "the child's pid")
        assert parent.poll() is None, parent.communicate()
        child = int(pid_file.read_text())
        yield parent, child
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.communicate()
        if pid_file.exists() and not _gone(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_child_whose_parent_is_killed_ends_itself(blocked) -> None:
    parent, child = blocked
    parent.kill()  # SIGKILL: no handler, no finally
    parent.communicate()
    wait_until(lambda: _gone(child), "the child to end after its parent")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                         ids=lambda s: signal.Signals(s).name)
def test_a_signal_ends_the_rebuild_in_one_line_its_child_stopped_first(
        blocked, database_url: str, signum: int) -> None:
    parent, child = blocked
    parent.send_signal(signum)
    _, stderr = parent.communicate(timeout=60)
    assert parent.returncode == 128 + signum, stderr
    assert "Traceback" not in stderr, stderr
    [line] = [said for said in stderr.splitlines() if said.startswith("vmledger")]
    assert line == (f"vmledger rebuild: stopped by {signal.Signals(signum).name}: a read model "
                    "not yet switched is as it was (the next rebuild clears what this one "
                    "left)")
    assert _gone(child)  # waited for before the parent ended
    done = vmledger("rebuild", database_url=database_url, env={"VMLEDGER_SIM_SERVERS": "1"})
    assert done.returncode == 0, done.stderr
