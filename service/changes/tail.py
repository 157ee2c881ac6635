"""``vmledger changes``: the changefeed read straight from the log, one line per change."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from service.changes.filters import ChangeFilter
from service.changes.reader import LogReader
from service.changes.records import Change, ChangeFolder
from service.storage import wake_on_appends

BATCH = 500


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
    Returns the last position read."""
    app = services.app  # type: ignore[attr-defined]
    settings = services.settings  # type: ignore[attr-defined]
    reader = LogReader(app.recorder, gap_timeout_s=settings.changes_gap_timeout_s)
    folder = ChangeFolder(app)
    end = reader.head()
    cursor = end if after is None else after
    wake = threading.Event()
    if follow:
        wake_on_appends(app.recorder, wake.set, stop)
    while not stop.is_set():
        wake.clear()
        notifications, cursor = reader.read_after(cursor, BATCH)
        for change in folder.fold(notifications):
            if shown.matches(change):
                emit(change)
        if len(notifications) == BATCH:
            continue
        if not follow and not reader.waiting_on_gap and cursor >= end:
            break
        poll = settings.changes_poll_s
        wake.wait(poll / 10 if reader.waiting_on_gap else poll)
    return cursor
