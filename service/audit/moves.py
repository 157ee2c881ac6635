"""Which events of a stretch of one stream were moved in the log (service/audit/chains.py):
the fewest whose positions, changed back, put the stretch in version order.

The events kept are a longest run increasing in both version and position; of several such
runs, the one with the most events at the very position the stretch's sorted positions give
their version (two events whose positions were swapped leave those between them there), then
the one ending latest. Naming every event that came after a later version named the intact
events between two swapped ones, and never the one moved earlier (auditor tester).
"""

from __future__ import annotations

from collections.abc import Sequence


def moved(stretch: Sequence[tuple[int, int]]) -> set[int]:
    """The versions of ``stretch`` (``(version, position)`` pairs, distinct versions, in any
    order) whose positions were changed. O(n log n) in its length."""
    events = sorted(stretch)
    ranks = {position: rank for rank, position in enumerate(sorted(p for _, p in events))}
    # best[r]: the best run ending at an event of position rank r, as (length, in place,
    # index); a Fenwick tree over ranks answers the best ending below a rank
    tree: list[tuple[int, int, int] | None] = [None] * (len(events) + 1)
    before: list[int | None] = []
    scores: list[tuple[int, int, int]] = []
    for index, (_, position) in enumerate(events):
        rank = ranks[position]
        best, at = None, rank
        while at > 0:
            if tree[at] is not None and (best is None or tree[at] > best):
                best = tree[at]
            at -= at & -at
        length, placed = (best[0], best[1]) if best is not None else (0, 0)
        score = (length + 1, placed + (rank == index), index)
        scores.append(score)
        before.append(best[2] if best is not None else None)
        at = rank + 1
        while at <= len(events):
            if tree[at] is None or score > tree[at]:  # type: ignore[operator]
                tree[at] = score
            at += at & -at
    kept: set[int] = set()
    index = max(scores)[2] if scores else None
    while index is not None:
        kept.add(events[index][0])
        index = before[index]
    return {version for version, _ in events} - kept
