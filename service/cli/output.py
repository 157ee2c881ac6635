"""What a command that streams its result to stdout (``history``, ``changes``, ``audit
verify``) does when its reader goes away: ``vmledger history VM | head -3``.

Python ignores SIGPIPE, so a write to a pipe nobody reads raises ``BrokenPipeError``, and
click ends the command on it with status 1 and nothing said (a tester: "sometimes exits 1",
whenever the output did not fit in the pipe's buffer before ``head`` left). A command here
ends as a C tool killed by SIGPIPE is reported by a shell instead, 128 + SIGPIPE = 141, and
says nothing: the reader chose to stop reading, and the status still tells a script that
the output was cut short (docs/operations.md, under "Processes")."""

from __future__ import annotations

import os
import signal
import sys

import typer

CLOSED_PIPE = 128 + signal.SIGPIPE  # 141


def put(line: str) -> None:
    """Print ``line`` to stdout (``typer.echo``, flushed at once); if nobody reads stdout any
    more, end the command quietly with ``CLOSED_PIPE`` (``SystemExit``, so ``finally``
    blocks still run)."""
    try:
        typer.echo(line)
    except BrokenPipeError:
        # what is still buffered would fail again at the interpreter's exit, and print
        # "Exception ignored ... BrokenPipeError" on stderr: stdout goes nowhere from now on
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise SystemExit(CLOSED_PIPE) from None
