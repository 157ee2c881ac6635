"""Aggregates a read model folded in its last committed batch, kept in memory for the next
batch (``VmView``'s VMs, ``JobView``'s jobs; docs/performance.md, P5).

A read model's rows at tracking position P are a function of the log up to P (a rebuild gives
the rows the live runner gives). A batch from P commits only if its claim moves the tracking
row from exactly P (``projections.tracking``). So aggregates folded up to P, as the batch that
reached P left them, equal what the rows at P would thaw to whenever the next batch from P
commits, whoever else applied, reset or switched meanwhile; and a batch whose claim fails
commits nothing, whatever it used.

What is kept is handed to one batch at a time and taken away at its start: the fold changes
the aggregates in place, so a batch that does not commit (refused, failed, rolled back) leaves
nothing kept, and the next one reads every row afresh.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any


class KeptFolds:
    """Up to ``bound`` aggregates by id, as folded at one tracking position; the most recently
    folded are kept when there are more. ``bound`` 0 keeps nothing.

    A batch calls ``begin(start)``, looks aggregates up with ``get`` (None: read the row),
    gives what it folded to ``folded`` and ends with ``end(position)`` once its transaction
    committed at ``position``, or ``end(None)`` when it did not. Each thread's batch is its
    own: two batches of one read model at once (two threads of one process) share nothing
    but what one of them takes at its start."""

    def __init__(self, bound: int):
        self.bound = bound
        self._lock = threading.Lock()
        self._at: int | None = None
        self._kept: OrderedDict[Any, Any] = OrderedDict()
        self._batch = threading.local()

    @property
    def at(self) -> int | None:
        """The tracking position what is kept was folded at; None when nothing is kept."""
        return self._at

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, key: Any) -> bool:
        return key in self._kept

    def begin(self, start: int) -> None:
        """Start a batch from tracking position ``start``: take what is kept if it was folded
        at ``start``; drop it otherwise."""
        with self._lock:
            taken = self._kept if self._at == start else OrderedDict()
            self._at, self._kept = None, OrderedDict()
        self._batch.taken, self._batch.folded = taken, None

    def get(self, key: Any) -> Any | None:
        """The aggregate ``key`` as kept for this thread's batch, or None (not kept, or no
        batch begun: a read model applied outside the runner's batches reads its rows)."""
        taken = getattr(self._batch, "taken", None)
        return None if taken is None else taken.get(key)

    def folded(self, aggregates: Mapping[Any, Any]) -> None:
        """The aggregates this thread's batch folded (by id), to keep if it commits."""
        self._batch.folded = aggregates

    def end(self, position: int | None) -> None:
        """End this thread's batch: committed at ``position`` (keep what it took and folded,
        as at ``position``), or not (None: keep nothing)."""
        taken = getattr(self._batch, "taken", None)
        folded = getattr(self._batch, "folded", None)
        self._batch.taken = self._batch.folded = None
        if position is None or taken is None or self.bound <= 0:
            return
        for key, aggregate in (folded or {}).items():
            taken[key] = aggregate
            taken.move_to_end(key)
        while len(taken) > self.bound:
            taken.popitem(last=False)
        with self._lock:
            self._at, self._kept = position, taken
