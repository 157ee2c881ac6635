"""Read models' tracking positions, moved by compare-and-set.

A runner claims a batch by moving each read model's row in ``projection_tracking`` from
exactly the position it read the batch at: a rival runner that moved it first, or a reset that
removed it, makes the claim fail, and the batch's transaction commits nothing
(``projections.runner``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from projections.db import Database, Tx

TRACKING_DDL = (
    "CREATE TABLE IF NOT EXISTS projection_tracking ("
    "name TEXT PRIMARY KEY, position BIGINT NOT NULL)"
)


# PostgreSQL: the claim as a function that aborts the transaction when any read model was not
# at the batch's start, so a batch's COMMIT can be sent with its claim, without waiting for the
# claim's answer first (``claim_or_abort``; docs/performance.md, P5). Its SQLSTATE is ours.
CLAIM_REFUSED = "VL001"
CLAIM_FUNCTION_DDL = f"""
CREATE OR REPLACE FUNCTION vmledger_claim(names TEXT[], start_at BIGINT, reach BIGINT)
RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE moved INTEGER;
BEGIN
    IF start_at = 0 THEN
        INSERT INTO projection_tracking (name, position) SELECT unnest(names), reach
        ON CONFLICT (name) DO UPDATE SET position = excluded.position
        WHERE projection_tracking.position = 0;
    ELSE
        UPDATE projection_tracking SET position = reach
        WHERE position = start_at AND name = ANY(names);
    END IF;
    GET DIAGNOSTICS moved = ROW_COUNT;
    IF moved < cardinality(names) THEN
        RAISE EXCEPTION USING ERRCODE = '{CLAIM_REFUSED}',
            MESSAGE = 'another runner moved the position past ' || start_at || ' first';
    END IF;
END $$"""


class ProjectionConflictError(Exception):
    """Another runner advanced the read model first; the batch was rolled back."""


def position_in(tx: Tx, name: str) -> int:
    """Read model ``name``'s position (0 before any), read inside ``tx``."""
    tx.execute("SELECT position FROM projection_tracking WHERE name = ?", (name,))
    row = tx.fetchone()
    return 0 if row is None else int(row["position"])


def applied_read_models(db: Database, tx: Tx) -> set[str]:
    """The read models that have applied events (their tracking row is past 0), in one
    query inside ``tx``; none where there is no tracking table (yet)."""
    if not {"name", "position"} <= db.columns(tx, "projection_tracking"):
        return set()
    tx.execute("SELECT name FROM projection_tracking WHERE position > 0")
    return {row["name"] for row in tx.fetchall()}


def positions_in(tx: Tx, names: Iterable[str]) -> Callable[[], dict[str, int]]:
    """Send the query of the positions of read models ``names`` in ``tx``; the answer (0 for
    one with no row) is read by calling what it returns, after ``tx``'s block: in a
    pipelined transaction the query then travels with its ``COMMIT``, one round trip."""
    answer = tx.submit("SELECT name, position FROM projection_tracking", ())
    names = list(names)

    def positions() -> dict[str, int]:
        found = {row["name"]: int(row["position"]) for row in answer()}
        return {name: found.get(name, 0) for name in names}
    return positions


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


def check_at(tx: Tx, names: Iterable[str], start: int) -> None:
    """Raise ``ProjectionConflictError`` unless every read model of ``names`` is at ``start``
    in ``tx`` (a batch folded before its claim: ``projections.writes_later``)."""
    moved = sorted(name for name, position in positions_in(tx, names)().items()
                   if position != start)
    if moved:
        raise ProjectionConflictError(
            f"{', '.join(moved)}: another runner moved the position from {start} first")


def claim_or_abort(tx: Tx, names: Sequence[str], start: int, position: int) -> None:
    """PostgreSQL: send the claim of ``claim`` as ``vmledger_claim``, which aborts ``tx``
    (SQLSTATE ``CLAIM_REFUSED``, raised when the transaction's results are read: see
    ``refused``) if any read model of ``names`` was not at ``start``. Nothing to wait for
    before ``COMMIT``."""
    tx.execute("SELECT vmledger_claim(?, ?, ?)", (list(names), start, position))


def refused(error: BaseException | None) -> bool:
    """Whether ``error``, or an error it was raised from, is ``vmledger_claim``'s refusal of
    a claim (``claim_or_abort``)."""
    while error is not None:
        if getattr(error, "sqlstate", None) == CLAIM_REFUSED:
            return True
        error = error.__cause__
    return False


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
