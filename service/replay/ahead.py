"""The trace's rows read ahead by a process of its own (``RowsAhead``), so that the replay's
process, which keeps one core busy, neither decompresses nor parses the file: on two cores the
reading overlaps the replay. The rows are the very rows of ``trace.read_rows``, in the same
order; the child sends them in chunks, pickled, through a pipe.

For a slice (``--max-jobs 80``: 1,511 rows, the last at line 295,296 of 450,146) the reading is
most of the work: every line is parsed to learn its job. For the whole shard it is about 1.5 s
of CPU of the replay's hundreds (docs/performance.md, "The whole shard's cache misses, turns
and futures; the reader ahead").

Run as ``python -m service.replay.ahead PATH SKIP_JOBS MAX_JOBS MAX_ROWS`` (the parent does;
``-`` for no limit).
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from service.replay.trace import scan_rows

# A chunk goes over when it holds CHUNK_ROWS rows, or when TICK_LINES more lines have been read
# (so a row followed by many unselected lines, as in a slice, does not wait for the next).
CHUNK_ROWS = 500
TICK_LINES = 2_000


class ReaderFailedError(RuntimeError):
    """The reader process ended without finishing (killed, or it could not start)."""


class RowsAhead:
    """``read_rows(path, skip_jobs=..., max_jobs=..., max_rows=...)``, read by a child process
    started at once: iterate it once, and ``close`` it (it ends the child if the replay stopped
    early). Iterating raises what reading raised in the child (``OSError``, ``EOFError`` for a
    truncated gzip; rows are parsed by the replay, not here), and ``ReaderFailedError`` if the
    child ended without a word."""

    def __init__(self, path: Path | str, *, skip_jobs: int = 0, max_jobs: int | None = None,
                 max_rows: int | None = None):
        def limit(value: int | None) -> str:
            return "-" if value is None else str(value)

        self._child = subprocess.Popen(
            [sys.executable, "-m", __name__, str(path), str(skip_jobs), limit(max_jobs),
             limit(max_rows)], stdout=subprocess.PIPE,
            # a process group of its own, from its first instruction: a terminal's ^C reaches
            # the replay only, which decides (and closes the pipe). Ignoring SIGINT once
            # started left its imports open to one, and their traceback (operator tester)
            process_group=0)

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        stream = self._child.stdout
        assert stream is not None
        while True:
            try:
                kind, payload = pickle.load(stream)
            except EOFError:  # not the trace's EOFError: the pipe ended without "end"
                raise ReaderFailedError(
                    f"the trace's reader ended early (exit status {self._child.wait()})"
                ) from None
            if kind == "rows":
                yield from payload
            elif kind == "error":
                raise payload
            else:
                return

    def close(self) -> None:
        """End the child if it is still reading, and reap it."""
        if self._child.poll() is None:
            self._child.kill()
        self._child.wait()
        if self._child.stdout is not None:
            self._child.stdout.close()


def _send(out: IO[bytes], kind: str, payload: Any) -> None:
    pickle.dump((kind, payload), out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()


def _read_ahead(out: IO[bytes], path: str, skip_jobs: int, max_jobs: int | None,
                max_rows: int | None) -> None:
    chunk: list[tuple[int, list[str]]] = []
    try:
        for line, fields in scan_rows(path, skip_jobs=skip_jobs, max_jobs=max_jobs,
                                      max_rows=max_rows, tick=TICK_LINES):
            if fields is not None:
                chunk.append((line, fields))
            if chunk and (fields is None or len(chunk) >= CHUNK_ROWS):
                _send(out, "rows", chunk)
                chunk = []
    except Exception as error:  # noqa: BLE001 - the parent raises it as its own
        _send(out, "error", error)
        return
    if chunk:
        _send(out, "rows", chunk)
    _send(out, "end", None)


if __name__ == "__main__":
    # Ctrl-C is the parent's to decide (it closes the pipe); the parent also starts this
    # process in a group of its own, which a terminal's ^C does not reach
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def _limit(text: str) -> int | None:
        return None if text == "-" else int(text)

    try:
        _read_ahead(sys.stdout.buffer, sys.argv[1], int(sys.argv[2]), _limit(sys.argv[3]),
                    _limit(sys.argv[4]))
    except BrokenPipeError:  # the parent stopped reading (its replay failed): nothing to say
        os._exit(0)
