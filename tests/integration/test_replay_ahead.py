"""The trace read ahead by a process of its own (service/replay/ahead.py): the same rows as
``read_rows``, the reading's errors raised in the replay's process, the child ended early."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from service.replay.ahead import CHUNK_ROWS, TICK_LINES, RowsAhead
from service.replay.trace import read_rows
from tests.trace import write_trace


def jobs_trace(path: Path, lines: int) -> Path:
    """A gzip trace of ``lines`` rows over jobs 0..9 (job n's rows at every tenth line,
    job 0 also first), with a quoted field (a user holding a comma), which only a CSV reader
    takes as one."""
    return write_trace(path, ([str(n), "", str(n % 10), str(n), f"m{n}", "0", f"user, {n}", "0",
                               "1", "0.1", "0.1", "0.1", "0"] for n in range(lines)))


def ahead(path: Path, **selection: int | None) -> list[tuple[int, list[str]]]:
    rows = RowsAhead(path, **selection)
    try:
        return list(rows)
    finally:
        rows.close()


@pytest.mark.parametrize("selection", [
    {}, {"max_jobs": 1}, {"skip_jobs": 3, "max_jobs": 2}, {"max_rows": CHUNK_ROWS + 7},
    {"skip_jobs": 10},
], ids=["all", "one job", "a slice", "max rows", "none"])
def test_rows_ahead_are_the_rows_read_rows_reads_in_its_order(tmp_path, selection):
    # more lines than a chunk holds and than a tick spans, so both hand-overs happen
    trace = jobs_trace(tmp_path / "t.csv.gz", 3 * TICK_LINES + 11)
    expected = list(read_rows(trace, **selection))
    assert ahead(trace, **selection) == expected
    assert expected or selection == {"skip_jobs": 10}


@pytest.mark.parametrize("content, error, told", [
    (b"plain text, not gzip\n", gzip.BadGzipFile, "Not a gzipped file"),
    (gzip.compress(b"0,,1,0,,0,u,0,1,0.1,0.1,0.1,0\n" * 50)[:40], EOFError, "ended before"),
], ids=["not gzip", "truncated"])
def test_a_file_the_reader_cannot_read_raises_its_error_in_the_replays_process(
        tmp_path, content, error, told):
    trace = tmp_path / "t.csv.gz"
    trace.write_bytes(content)
    with pytest.raises(error, match=told):
        ahead(trace)


def test_closing_before_the_end_ends_the_reader(tmp_path):
    trace = jobs_trace(tmp_path / "t.csv.gz", 4 * CHUNK_ROWS)
    rows = RowsAhead(trace)
    first = next(iter(rows))
    rows.close()
    assert first == (1, ["0", "", "0", "0", "m0", "0", "user, 0", "0", "1", "0.1", "0.1",
                         "0.1", "0"])
    assert rows._child.returncode is not None
