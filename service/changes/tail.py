"""``vmledger changes``: the changefeed read straight from the log, one line per change."""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable

from service.append_wakeups import wake_on_appends
from service.changes.filters import ChangeFilter
from service.changes.reader import LogReader
from service.changes.records import DAMAGED, Change, ChangeFolder
from service.db_retry import retry_transient

BATCH = 500
# The wait between tries to read the log again while the database cannot be reached: a
# cut connection is replaced within the first, a longer outage is tried every 5 s at least.
FIRST_RETRY_S = 0.1
LONGEST_RETRY_S = 5.0


class _Stopped(Exception):
    """``stop`` was set while the follower waited to read the log again."""


def line(change: Change) -> str:
    """``POSITION TIMESTAMP KIND UUID vVERSION TYPE [state=S] [owner=O] actor=A``; for a
    ``damaged`` change, which has no timestamp or actor, ``POSITION - KIND UUID vVERSION
    damaged error=WHY``."""
    data = json.loads(change.data)
    parts = [str(change.position), data.get("timestamp", "-"), change.kind, change.uuid,
             f"v{change.version}", change.type]
    if change.type == DAMAGED:
        return " ".join([*parts, f"error={data['error']}"])
    if "state" in data:
        parts.append(f"state={data['state']}")
    if change.owner_uuid:
        parts.append(f"owner={change.owner_uuid}")
    parts.append(f"actor={(data.get('cause') or {}).get('actor')}")
    return " ".join(parts)


def tail(services: object, after: int | None, shown: ChangeFilter, *, follow: bool,
         emit: Callable[[Change], None], stop: threading.Event,
         warn: Callable[[str], object] | None = None, end: int | None = None) -> int:
    """Emit the changes after ``after`` (``None``: from the head) that ``shown`` matches, in
    log order; until ``end`` (default: the head as it was at the start), or with ``follow``
    until ``stop``. Returns the last position read.

    With ``follow`` a database error (a cut connection, an outage: ``TRANSIENT_ERRORS``) does
    not end it, as it does not end ``GET /changes`` (docs/api.md, "Changes"): one line to
    ``warn`` per outage (a warning logged without ``warn``), then the log is read again after
    the last position read, every 0.1 s, 0.2 s, ... up to 5 s (``retry_transient``), so
    nothing is skipped or repeated. Without ``follow`` the error is raised. A gap passed after
    ``VMLEDGER_CHANGES_GAP_TIMEOUT_S`` is also told to ``warn``, in one line."""
    app = services.app  # type: ignore[attr-defined]
    settings = services.settings  # type: ignore[attr-defined]
    timeout_s = settings.changes_gap_timeout_s

    def gap_passed() -> None:
        if warn is not None:
            warn(f"changes: a log position still missing after {timeout_s:.0f} s was passed "
                 "(a transaction left open?)")

    reader = LogReader(app.recorder, gap_timeout_s=timeout_s, on_gap_skipped=gap_passed)
    folder = ChangeFolder(app)
    end = reader.head() if end is None else end
    cursor = end if after is None else after
    wake = threading.Event()
    if follow:
        wake_on_appends(app.recorder, wake.set, stop)

    def read() -> tuple[int, int, list[Change]]:
        """The next batch: how many events it held, the position reached, its changes."""
        notifications, reached = reader.read_after(cursor, BATCH)
        return len(notifications), reached, folder.fold(notifications)

    def wait_unless_stopped(seconds: float) -> None:
        if stop.wait(seconds):
            raise _Stopped

    def read_through_outages() -> tuple[int, int, list[Change]]:
        return retry_transient(
            read, until=lambda: math.inf, sleep=wait_unless_stopped,
            what=f"changes: reading the log after position {cursor}",
            first_wait_s=FIRST_RETRY_S, longest_wait_s=LONGEST_RETRY_S, level=logging.WARNING,
            report=warn)

    while not stop.is_set():
        wake.clear()
        try:
            count, reached, changes = read_through_outages() if follow else read()
        except _Stopped:
            break
        # Only now, all of the batch read: a failure above reads it again, whole.
        cursor = reached
        for change in changes:
            if shown.matches(change):
                emit(change)
        # the head as it was at the start reached: done, without reading on (a full batch
        # ending there read once more, and printed what was appended since)
        if not follow and not reader.waiting_on_gap and cursor >= end:
            break
        if count == BATCH:
            continue
        poll = settings.changes_poll_s
        wake.wait(poll / 10 if reader.waiting_on_gap else poll)
    return cursor
