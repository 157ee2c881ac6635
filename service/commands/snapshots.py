"""Snapshots of long streams, so that a process that has not cached an aggregate loads it
from a snapshot and at most ``SNAPSHOT_EVERY`` events rather than from its first event.

A VM that lives for years, and a server that every VM placed on it claims capacity from,
gather thousands of events: folding a 10,000-event stream took 260 ms, and the first command
on such a VM in a fresh process 320 ms (docs/performance.md, P2). The library's automatic
snapshots (``snapshotting_intervals``) are taken by ``save`` outside the events' transaction
and raise from ``save`` when they fail, after the events were committed: a command handler
would then take a committed command for a conflict and decide it again. So vmledger takes
them itself, after the save, as best effort: a snapshot is an optimization, and a missing one
costs only a longer fold.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from eventsourcing.application import Application

SNAPSHOT_EVERY = 100

log = logging.getLogger(f"vmledger.{__name__}")


def snapshot_long_streams(app: Application[Any], recordings: Sequence[Any],
                          every: int = SNAPSHOT_EVERY) -> int:
    """Take a snapshot of each aggregate whose saved events (``recordings``, what
    ``Application.save`` returned) include a version that is a multiple of ``every``; return
    how many were taken. Never raises: a snapshot another process took first, or any failure,
    is logged and left."""
    taken = 0
    for recording in recordings:
        event = recording.domain_event
        if event.originator_version % every:
            continue
        try:
            app.take_snapshot(event.originator_id, version=event.originator_version)
            taken += 1
        except Exception as error:  # noqa: BLE001 - the command has succeeded either way
            log.warning("no snapshot of %s at version %s: %s", event.originator_id,
                        event.originator_version, error)
    return taken
