"""Read models' tracking positions, moved by compare-and-set.

A runner claims a batch by moving each read model's row in ``projection_tracking`` from
exactly the position it read the batch at: a rival runner that moved it first, or a reset that
removed it, makes the claim fail, and the batch's transaction commits nothing
(``projections.runner``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from projections.db import Tx


class ProjectionConflictError(Exception):
    """Another runner advanced the read model first; the batch was rolled back."""


def claim(tx: Tx, names: Sequence[str], start: int, position: int) -> Callable[[], None]:
    """Send one statement moving every read model of ``names`` from exactly ``start`` to
    ``position``; the function returned raises ``ProjectionConflictError`` if any of them
    was not at ``start`` (another runner moved it first, or a reset removed its row: a
    missing row is at 0)."""
    if start:
        answer = tx.submit(
            "UPDATE projection_tracking SET position = ? WHERE position = ? AND name IN ("
            + ", ".join("?" * len(names)) + ") RETURNING name",
            [position, start, *names])
    else:
        answer = tx.submit(
            "INSERT INTO projection_tracking (name, position) VALUES "
            + ", ".join(["(?, ?)"] * len(names))
            + " ON CONFLICT (name) DO UPDATE SET position = excluded.position "
            "WHERE projection_tracking.position = 0 RETURNING name",
            [value for name in names for value in (name, position)])

    def check() -> None:
        missed = set(names) - {row["name"] for row in answer()}
        if missed:
            raise ProjectionConflictError(
                f"{', '.join(sorted(missed))}: another runner moved the position past "
                f"{start} first")
    return check


def conflict_over(check: Callable[[], None], error: Exception) -> None:
    """Raise ``check``'s ``ProjectionConflictError`` (from ``error``) if the claim failed;
    otherwise, or when its answer cannot be read (an aborted transaction), return, and
    ``error`` stands."""
    try:
        check()
    except ProjectionConflictError as conflict:
        raise conflict from error
    except Exception:  # noqa: BLE001 - the original error is the one to raise
        return
