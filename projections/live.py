"""The projection runner's background loop, and what it keeps between passes
(docs/performance.md, P5).

The positions its own commits reached, instead of reading them before each batch, and the log
after the last batch as read in that batch's own transaction just before its commit, so the
next batch comes back with this one's commit. Neither is trusted: a batch claims its tracking
rows by compare-and-set from the position it starts at (``projections.tracking``), so a stale
position or read-ahead (another runner's commit, a rebuild, a reset) commits nothing and the
loop reads both afresh.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from eventsourcing.persistence import Notification

from projections.collector import LongLivedFrozen
from projections.db import Tx
from projections.tracking import ProjectionConflictError


@runtime_checkable
class LogInTransaction(Protocol):
    """A notification source that can read the log inside a read models' transaction (the
    PostgreSQL event store's recorder, ``service.storage``)."""

    def submit_notifications(self, tx: Tx, after: int, limit: int
                             ) -> Callable[[], Sequence[Notification]]:
        """Send the read of up to ``limit`` notifications after position ``after`` in ``tx``
        (``Tx.submit``); the function returned gives them once ``tx`` has ended."""
        ...


@dataclass
class LiveState:
    """The background loop's knowledge between passes.

    ``positions``: where the read models stand, as the loop's own commits left them (None:
    read them afresh). ``ahead``: the notifications after position ``ahead_at``, read in the
    last batch's transaction (empty: nothing read ahead)."""

    positions: dict[str, int] | None = None
    ahead_at: int | None = None
    ahead: Sequence[Notification] = ()

    def forget(self) -> None:
        """Read positions and log afresh in the next pass."""
        self.positions, self.ahead_at, self.ahead = None, None, ()

    def keep_ahead(self, position: int, notifications: Sequence[Notification]) -> None:
        """Keep ``notifications``, the log after ``position`` as read just now."""
        self.ahead_at, self.ahead = position, notifications

    def take_ahead(self, start: int) -> Sequence[Notification] | None:
        """The notifications read ahead after ``start`` (once), or None: none were, or they
        were read after another position, or nothing was there then (the log is read again:
        the wake-up that started this pass may be for a later append)."""
        found = self.ahead if self.ahead_at == start and self.ahead else None
        self.ahead_at, self.ahead = None, ()
        return found


# While passes fail, the lag is read at most this often (seconds): as often as the log says
# the failure (service.logs.Throttled), not after every pass.
FAILING_LAG_S = 10.0


class BackgroundLoop:
    """The runner's loop (``projections.runner.ProjectionRunner`` is one): it needs the
    runner's ``catch_up``, ``positions``, ``report_lag``, ``mend_stale_tables``, ``wake``
    and its wake-up flag ``_wake``."""

    _wake: threading.Event
    catch_up: Callable[..., int]
    positions: Callable[[], dict[str, int]]
    report_lag: Callable[..., None]
    lag_interval_s: float
    mend_stale_tables: Callable[[], None]
    wake: Callable[[], None]

    def run_forever(self, stop: threading.Event, poll_s: float,
                    on_error: Callable[[BaseException], None] | None = None,
                    frozen: LongLivedFrozen | None = None) -> None:
        """Catch up, then wait for a wake-up or ``poll_s``, until ``stop`` is set.

        Between passes that applied events the loop keeps what its own commits reached
        (``LiveState``): the positions, instead of reading them again, and the log read ahead
        in the last batch's transaction, with which the next pass starts at once; the claim's
        compare-and-set still refuses a stale one (another runner's, a rebuild's). The
        wake-up flag is cleared before each pass, and every pass reads the log after that
        (afresh, or ahead again in its batch's transaction), so an append committed after its
        last read wakes the loop. After a pass that applied nothing, an idle wait or any
        error it reads positions and log afresh: a reset with no append after it finds no
        event past the kept positions, so only a fresh read can see it, however often
        waiters wake the loop (docs/performance.md, P5). With ``frozen`` (a process of its
        own: ``vmledger project``), the process's long-lived objects are kept from the garbage
        collector's full collections between passes."""
        live = LiveState()
        mended = False
        failing_lag_at = -math.inf  # when the lag was last read after a failing pass
        while not stop.is_set():
            if frozen is not None:
                frozen.tick()
            self._wake.clear()  # every pass reads the log after this (fresh, or ahead again)
            try:
                if not mended:  # read models start-up left stale (tried again after an error)
                    self.mend_stale_tables()
                    mended = True
                applied = self.catch_up(live=live)
            except ProjectionConflictError:
                live.forget()
                continue  # another runner applied it; read the new position and go on
            except Exception as error:  # noqa: BLE001 - keep serving; report and retry
                live.forget()
                if on_error:
                    on_error(error)
                # a failing pass leaves its read models behind: the lag says how far (unless
                # the database cannot even say that). Not every pass: in an outage each read
                # of the head waits out its retries and gives up with a warning
                if time.monotonic() - failing_lag_at >= max(FAILING_LAG_S,
                                                            self.lag_interval_s):
                    failing_lag_at = time.monotonic()
                    with contextlib.suppress(Exception):
                        self.report_lag()
                stop.wait(poll_s)
                continue
            failing_lag_at = -math.inf  # the next failure, after this success, says it
            if not applied:
                live.forget()
            elif live.ahead:
                continue  # the next batch is in hand
            if not self._wake.wait(poll_s):
                live.forget()  # idle: read them again (a reset with no append after it)

    def wait_for(self, position: int, names: Iterable[str], timeout: float,
                 interval: float = 0.005) -> bool:
        """Wait until the named read models reach ``position``; False on timeout."""
        deadline = time.monotonic() + timeout
        names = list(names)
        while True:
            positions = self.positions()
            if all(positions.get(name, 0) >= position for name in names):
                return True
            if time.monotonic() >= deadline:
                return False
            self.wake()
            time.sleep(interval)

