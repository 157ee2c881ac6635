"""Read models whose tracking position is past the log's head (tester D, bug 5).

Only an edit of ``projection_tracking`` (or a restore of the log older than the read models)
puts a read model there. Run as usual, its batches after that position are empty until the
log passes it, and then it goes on from there: the events appended meanwhile are skipped for
good, silently (jobs in ``job_view`` are never seen by a worker). So the runner does not run
such a read model: it logs it, at most once a minute, and ``/ping`` names it; the operator's
fix is ``vmledger rebuild NAME`` (docs/operations.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

LOG_INTERVAL_S = 60.0  # a read model left past the head is logged this often, not per pass

log = logging.getLogger(f"vmledger.{__name__}")


class PastHead:
    """The runner's record of the read models it found past the head, and the positions
    it found them at."""

    def __init__(self, head: Callable[[], int]):
        self._head = head
        self.refused: dict[str, int] = {}  # name -> the position it was found past the head at
        self._checked: dict[str, int] = {}  # name -> the last start compared with the head
        self._logged_at: dict[str, float] = {}

    def allowed(self, name: str, position: int) -> bool:
        """Whether read model ``name``, at ``position``, may be run: not while it stays at
        the position it was found past the head at (a rebuild or reset moves it)."""
        at = self.refused.get(name)
        if at is None:
            return True
        if at != position:
            del self.refused[name]
            self._logged_at.pop(name, None)
            return True
        self._log(name, position, None)
        return False

    def found_nothing(self, names: Iterable[str], start: int,
                      head: Callable[[], int] | None = None) -> None:
        """A batch after ``start`` was empty for read models ``names``: compare ``start``
        with the head (``head()``, the runner's pass may have read it already; by default
        the one given at construction), once per start (the head only grows, so an idle
        loop costs no extra query), and refuse those past it."""
        unchecked = [name for name in names if self._checked.get(name) != start]
        if not unchecked:
            return
        at = (head or self._head)()
        for name in unchecked:
            self._checked[name] = start
            if start > at:
                self.refused[name] = start
                self._log(name, start, at)

    def _log(self, name: str, position: int, head: int | None) -> None:
        now = time.monotonic()
        if now - self._logged_at.get(name, float("-inf")) < LOG_INTERVAL_S:
            return
        self._logged_at[name] = now
        head = self._head() if head is None else head
        log.warning("read model %s is at position %s, past the log's head %s: it is not run; "
                    "`vmledger rebuild %s` rebuilds it", name, position, head, name)
