"""How a benchmark script stops on SIGINT or SIGTERM: through its ``with`` and ``finally``
blocks, so that its deployment, child processes and scratch database never outlive it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def _stop_on_signal(signum: int, _frame: object) -> None:
    """Turn SIGINT or SIGTERM into ``SystemExit(128 + signum)`` in the main thread, so every
    ``with`` and ``finally`` on the way out runs: deployments stopped, child processes ended,
    scratch databases dropped. Repeats are ignored from then on (``run_all`` forwards a Ctrl-C
    the child has already had from the terminal), so the clean-up is not cut short."""
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, signal.SIG_IGN)
    print(f"{signal.Signals(signum).name}: stopping, cleaning up (deployment, child "
          "processes, scratch database)", file=sys.stderr, flush=True)
    raise SystemExit(128 + signum)


def stop_cleanly_on_signals() -> None:
    """Install ``_stop_on_signal`` for SIGINT and SIGTERM (main thread only; every script
    gets it by importing this module)."""
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, _stop_on_signal)



@contextmanager
def ended_on_exit(process: subprocess.Popen[Any], *, group: bool = False) -> Iterator[None]:
    """Terminate ``process`` (its whole process group with ``group``) if it is still running
    when the block is left, normally or not, and wait for it (SIGKILL after 20 s)."""
    try:
        yield
    finally:
        stop_process(process, group=group)


def stop_process(process: subprocess.Popen[Any], *, group: bool = False) -> None:
    """SIGTERM ``process`` (or its process group) if it still runs; SIGKILL after 20 s."""
    def send(sig: int) -> None:
        try:
            os.killpg(process.pid, sig) if group else process.send_signal(sig)
        except ProcessLookupError:
            pass

    if process.poll() is None:
        send(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        process.wait()
