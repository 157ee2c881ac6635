"""``vmledger`` run as an operator runs it: the installed entry point, in a process of its own,
on the environment of the tests with some variables added (or, given as None, removed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

VMLEDGER = str(Path(sys.executable).with_name("vmledger"))


def environment(env: Mapping[str, str | None] | None = None,
                database_url: str | None = None) -> dict[str, str]:
    """This process's environment with ``env`` added (a None value removes the variable) and
    ``VMLEDGER_DATABASE_URL`` set to ``database_url`` when one is given."""
    merged = {**os.environ, **(env or {})}
    if database_url is not None:
        merged["VMLEDGER_DATABASE_URL"] = database_url
    return {name: value for name, value in merged.items() if value is not None}


def vmledger(*args: str, env: Mapping[str, str | None] | None = None,
             database_url: str | None = None, cwd: Path | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``vmledger ARGS`` run to its end (at most ``timeout`` s), its output captured as text;
    its exit status is the caller's to check."""
    return subprocess.run([VMLEDGER, *args], env=environment(env, database_url), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False)


def vmledger_process(*args: str, log_path: str | Path,
                     env: Mapping[str, str | None] | None = None,
                     database_url: str | None = None) -> subprocess.Popen[bytes]:
    """``vmledger ARGS`` started in a session of its own (a test may signal its whole process
    group), its output appended to ``log_path``."""
    with open(log_path, "ab") as log:  # the process keeps its own copy of the descriptor
        return subprocess.Popen([VMLEDGER, *args], env=environment(env, database_url),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_processes(processes: Iterable[subprocess.Popen[bytes]], timeout: float = 15) -> None:
    """Stop processes started by ``vmledger_process``: SIGTERM to each one's group, then
    SIGKILL to the groups of those not ended ``timeout`` s later (in all)."""
    processes = list(processes)
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
