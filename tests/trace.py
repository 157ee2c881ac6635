"""Google 2011 ``task_events`` traces for the tests: where they find the real shard
(``VMLEDGER_TRACE``, else ``shared/data/`` beside the repository), and what a test that needs
it does when it is missing: it skips with the reason on a developer's machine, and fails under
``VMLEDGER_REQUIRE_TRACE=1`` (set by ``.ci/run``), so a missing file never passes CI as
skipped tests. And small traces of their own, made of ``row``s (``write_trace``)."""

from __future__ import annotations

import csv
import functools
import gzip
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
TRACE = Path(os.environ.get(
    "VMLEDGER_TRACE",
    REPO.parent / "shared" / "data" / "google2011_task_events_part-00000-of-00500.csv.gz",
))
REQUIRE_TRACE = os.environ.get("VMLEDGER_REQUIRE_TRACE") == "1"
MISSING = f"trace not found at {TRACE}; set VMLEDGER_TRACE to the task_events shard"


def needs_trace(test: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``test`` as needing the trace: unchanged when the file is there; else skipped,
    or failed when ``VMLEDGER_REQUIRE_TRACE=1``."""
    if TRACE.is_file():
        return test
    if not REQUIRE_TRACE:
        return pytest.mark.skip(reason=MISSING)(test)

    @functools.wraps(test)
    def missing(*args: Any, **kwargs: Any) -> None:
        pytest.fail(f"{MISSING} (VMLEDGER_REQUIRE_TRACE=1)")
    return missing


SUBMIT, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST, UPDATE_PENDING = range(8)


def row(event: int, *, job: str = "7", index: str = "0", machine: str = "",
        cpu: str = "0.125", mem: str = "0.0625") -> list[str]:
    """A task_events row (timestamp, missing, job, index, machine, event, user, class,
    priority, cpu, memory, disk, different-machines)."""
    return ["1000", "", job, index, machine, str(event), "user-a", "1", "4", cpu, mem, "0", "0"]


def write_trace(path: Path, rows: Iterable[list[str]]) -> Path:
    """``rows`` as a trace file at ``path``: CSV (a field holding a comma quoted), gzipped
    when the name ends in ``.gz``, as the shards are."""
    with (gzip.open(path, "wt", newline="") if path.suffix == ".gz"
          else open(path, "w", newline="")) as stream:
        csv.writer(stream).writerows(rows)
    return path
