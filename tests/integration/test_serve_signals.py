"""``vmledger serve`` stopped by a signal (docs/operations.md, "Stopping processes"): one
process ends with the signal's status once its shutdown is done, SIGINT (^C) as SIGTERM does
(it exited 0 on SIGINT: a tester), and ``--workers 2`` stopped by a ^C while its HTTP
processes still start ends quietly (each printed a ``KeyboardInterrupt`` traceback from its
imports, and the parent once logged "listening" after they had shut down: a tester)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.cli import vmledger_process
from tests.integration.processes import free_port
from tests.integration.test_serve_processes import answers, children_of
from tests.waiting import wait_until

# long runs of real processes: .ci/slow.sh runs them, the default run leaves them out
pytestmark = pytest.mark.slow


def start_serving(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], int, Path]:
    port = free_port()
    log_path = tmp_path / "serve.log"
    process = vmledger_process("serve", "--port", str(port), *args, log_path=log_path,
                               database_url=f"sqlite:///{tmp_path / 'vmledger.db'}",
                               env={"VMLEDGER_EMBEDDED_RUNNERS": "false"})
    return process, port, log_path


def ended(process: subprocess.Popen[bytes]) -> int:
    try:
        return process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.mark.parametrize("signum, status", [
    (signal.SIGINT, 130),  # SystemExit(130), as every command's ^C
    (signal.SIGTERM, -signal.SIGTERM),  # uvicorn raises it again: 143 to a shell
], ids=["SIGINT to its group (^C)", "SIGTERM"])
def test_one_process_ends_with_the_signals_status_after_its_shutdown(tmp_path, signum, status):
    process, port, log_path = start_serving(tmp_path)
    try:
        wait_until(lambda: answers(port), "the service to answer", log_path=log_path)
        os.killpg(process.pid, signum)
    finally:
        code = ended(process)
    log = log_path.read_text()
    assert code == status, log
    assert "Finished server process" in log and "Traceback" not in log, log


def spawned(parent: int) -> list[int]:
    """The HTTP processes of ``serve --workers`` (not multiprocessing's resource tracker)."""
    found = []
    for pid in children_of(parent):
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue  # ended meanwhile
    return found


def importing(pid: int) -> bool:
    """Whether process ``pid`` has begun importing the app: pydantic's compiled core is
    loaded (the imports then go on for a second or more)."""
    try:
        return "pydantic_core" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_a_ctrl_c_while_the_http_processes_start_ends_quietly(tmp_path):
    process, _port, log_path = start_serving(tmp_path, "--workers", "2")
    try:
        # the ^C lands while the processes import the app
        wait_until(lambda: len(children := spawned(process.pid)) == 2
                   and all(map(importing, children)), "the HTTP processes to import the app",
                   log_path=log_path, interval=0.01)
        os.killpg(process.pid, signal.SIGINT)
    finally:
        code = ended(process)
    log = log_path.read_text()
    assert code == 0, log  # the parent passed the signal on (docs/operations.md)
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log
    assert "listening on" not in log.split("Shutting down", 1)[-1], log


def reaches(pid: int, terminal_group: int) -> bool | None:
    """Whether a ^C to ``terminal_group`` would interrupt process ``pid``: it is in that
    process group and neither blocks nor ignores SIGINT (None: it has ended)."""
    try:
        group = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])
        status = dict(line.split(":\t", 1) for line in
                      Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
    except (OSError, IndexError, ValueError):
        return None
    sigint = 1 << (signal.SIGINT - 1)
    held = int(status["SigBlk"], 16) | int(status["SigIgn"], 16)
    return group == terminal_group and not held & sigint


def test_no_http_process_can_be_reached_by_the_terminals_ctrl_c(tmp_path):
    # each moved to a process group of its own only once it had imported the app, and a ^C
    # during those imports printed their tracebacks (a tester: 2 of 9 tries)
    process, port, log_path = start_serving(tmp_path, "--workers", "2")
    seen: dict[int, list[bool]] = {}

    def look() -> bool:
        for pid in spawned(process.pid):
            found = reaches(pid, process.pid)
            if found is not None:
                seen.setdefault(pid, []).append(found)
        return answers(port)

    try:
        wait_until(look, "the service to answer", log_path=log_path, interval=0.005)
    finally:
        process.send_signal(signal.SIGTERM)
        assert ended(process) == 0
    assert len(seen) == 2 and not any(any(looks) for looks in seen.values()), seen
