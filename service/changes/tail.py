"""``vmledger changes``: the changefeed read straight from the log, one line per change."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from service.changes.filters import ChangeFilter
from service.changes.reader import LogReader
from service.changes.records import Change, ChangeFolder
from service.jobs.transient import TRANSIENT_ERRORS
from service.append_wakeups import wake_on_appends

log = logging.getLogger(f"vmledger.{__name__}")

BATCH = 500
# The wait between tries to read the log again while the database cannot be reached: a
# cut connection is replaced within the first, a longer outage is tried every 5 s at least.
FIRST_RETRY_S = 0.1
LONGEST_RETRY_S = 5.0


def line(change: Change) -> str:
    """``POSITION TIMESTAMP KIND UUID vVERSION TYPE [state=S] [owner=O] actor=A``."""
    data = json.loads(change.data)
    parts = [str(change.position), data["timestamp"], change.kind, change.uuid,
             f"v{change.version}", change.type]
    if "state" in data:
        parts.append(f"state={data['state']}")
    if change.owner_uuid:
        parts.append(f"owner={change.owner_uuid}")
    parts.append(f"actor={(data.get('cause') or {}).get('actor')}")
    return " ".join(parts)


def tail(services: object, after: int | None, shown: ChangeFilter, *, follow: bool,
         emit: Callable[[Change], None], stop: threading.Event) -> int:
    """Emit the changes after ``after`` (``None``: from the head) that ``shown`` matches, in
    log order; until the head as it was at the start, or with ``follow`` until ``stop``.
    Returns the last position read.

    With ``follow`` a database error (a cut connection, an outage: ``TRANSIENT_ERRORS``) does
    not end it, as it does not end ``GET /changes`` (docs/api.md, "Changes"): one warning,
    then the log is read again after the last position read, every 0.1 s, 0.2 s, ... up to
    5 s, so nothing is skipped or repeated. Without ``follow`` the error is raised."""
    app = services.app  # type: ignore[attr-defined]
    settings = services.settings  # type: ignore[attr-defined]
    reader = LogReader(app.recorder, gap_timeout_s=settings.changes_gap_timeout_s)
    folder = ChangeFolder(app)
    end = reader.head()
    cursor = end if after is None else after
    wake = threading.Event()
    if follow:
        wake_on_appends(app.recorder, wake.set, stop)
    retry_s = 0.0  # while reading fails (0: it does not)
    while not stop.is_set():
        wake.clear()
        try:
            notifications, after = reader.read_after(cursor, BATCH)
            changes = folder.fold(notifications)
        except TRANSIENT_ERRORS as error:
            if not follow:
                raise
            retry_s = _reconnecting(error, cursor, retry_s)
            stop.wait(retry_s)
            continue
        retry_s = 0.0
        # Only now, all of the batch read: a failure above reads it again, whole.
        cursor = after
        for change in changes:
            if shown.matches(change):
                emit(change)
        if len(notifications) == BATCH:
            continue
        if not follow and not reader.waiting_on_gap and cursor >= end:
            break
        poll = settings.changes_poll_s
        wake.wait(poll / 10 if reader.waiting_on_gap else poll)
    return cursor


def _reconnecting(error: Exception, cursor: int, retry_s: float) -> float:
    """Say once per outage that reading the log failed; the wait before the next try."""
    if not retry_s:
        log.warning("changes: reading the log failed (%s: %s); reconnecting, resuming "
                    "after position %d", type(error).__name__, error, cursor)
        return FIRST_RETRY_S
    return min(retry_s * 2, LONGEST_RETRY_S)
