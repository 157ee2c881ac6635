"""The cyclic garbage collector's settings for vmledger's own processes and batch work.

Two costs, both measured under the benchmarks' loads (docs/performance.md, "The garbage
collector"): young collections, every 700 net allocations by CPython's default, each walking
the objects alive at that moment (a request's, a batch's decoded events and folds), most of
which would have died a little later; and full collections walking again the long-lived
objects a process keeps (the aggregate cache, the read models' kept folds).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# Net allocations between two young collections (CPython's default 700): ten times rarer,
# their time fell 16-fold under the P1 load and from 1.8 s to 0.6 s in a 100,000-event
# rebuild, where they had been a fifth of the CPU.
YOUNG_COLLECTION_EVERY = 7_000


def collect_young_less_often() -> None:
    """Young collections at least ``YOUNG_COLLECTION_EVERY`` net allocations apart in this
    process from now on (a higher threshold already set is kept): for processes that are
    vmledger's own (``serve``'s, ``project``), not for a library user's or pytest's."""
    young, *older = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_COLLECTION_EVERY), *older)


@contextmanager
def fewer_young_collections() -> Iterator[None]:
    """``collect_young_less_often`` for the work inside, then the thresholds as they were
    (a rebuild, in whatever process runs it)."""
    before = gc.get_threshold()
    collect_young_less_often()
    try:
        yield
    finally:
        gc.set_threshold(*before)


class LongLivedFrozen:
    """Keeps the cyclic garbage collector off a long-running process's long-lived objects (the
    projection runner's, ``vmledger project``; an HTTP process's, ``vmledger serve``): every
    ``freeze_every_s`` the objects alive then move into its permanent generation
    (``gc.freeze``), which its collections do not walk; every ``collect_every_s`` they move
    back and one full collection runs (``gc.unfreeze``, ``gc.collect``).

    Why, in the runner: the read models keep thousands of folded VMs and jobs between batches
    (``projections.kept_folds``), hundreds of thousands of objects that each full collection
    walked again, 90-130 ms of CPU at a time in the middle of a pass: the projection lag's
    p99 under the P1 load (docs/performance.md, "Deciding on the cache"). Frozen objects are
    still freed when their last reference goes; only a reference cycle that became garbage
    while frozen waits for the next full collection, so what it can hold is bounded by
    ``collect_every_s``."""

    def __init__(self, freeze_every_s: float = 5.0, collect_every_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic):
        self.freeze_every_s = freeze_every_s
        self.collect_every_s = collect_every_s
        self._clock = clock
        now = clock()
        self._next_freeze = now + freeze_every_s
        self._next_collect = now + collect_every_s

    def tick(self) -> None:
        """Freeze, or thaw and collect, when it is time (called often: between the runner's
        passes, every second from a served app's lifespan)."""
        now = self._clock()
        if now >= self._next_collect:
            gc.unfreeze()
            gc.collect()
            self._next_collect = now + self.collect_every_s
            self._next_freeze = now + self.freeze_every_s
        elif now >= self._next_freeze:
            gc.freeze()
            self._next_freeze = now + self.freeze_every_s
