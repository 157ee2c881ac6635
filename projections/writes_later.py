"""Folding a batch outside SQLite's write lock: a read model whose writes read nothing back
(``ReadModel.blind_writes``) is applied in a read transaction with its statements kept
(``WritesLater``), and only the kept statements run in the batch's write transaction.

SQLite has one writer at a time, and the runner's write transaction takes the lock at its
``BEGIN IMMEDIATE`` (``projections.db``). Holding it while Python folds a batch kept every
other writer of the database waiting that long: beside a trace replay the follower held it
for most of its time, and the replay's appends waited (docs/performance.md, "The follower
held SQLite's write lock"). The statements, sent later, are the same ones in the same order,
so the rows are those an apply under the lock would write.

Why the read transaction's rows are still right when the kept statements run: its first
query checks that every read model of the batch is at ``start`` in its snapshot, and the
write transaction's claim moves them from exactly ``start``. Read-model rows change only in a
transaction that moves their tracking position too, so rows that were those at ``start`` when
read are still those at ``start`` (or, after a reset and a rival's rebuild back to ``start``,
rows equal to them: a read model is a function of the log) when the claim holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from projections.db import Database, Dialect, Tx
from projections.read_model import ReadModel, apply_together
from projections.tracking import check_at


class WritesLater(Tx):
    """A ``Tx`` over a read transaction that runs what reads rows (``submit``,
    ``submit_rows_by_key``) at once and keeps ``execute`` and ``executemany`` to be run,
    in the order given, by ``run_in`` in another transaction. Parameters are kept as given,
    not copied (``run_in``'s ``Tx`` copies them once): a read model builds them for the
    call and never changes them after. Asking for rows of a kept statement (``fetchall``,
    ``fetchone``) raises ``TypeError``: a read model that does so has no blind writes."""

    def __init__(self, reads: Tx):
        super().__init__(None, reads.dialect)
        self._reads = reads
        self._kept: list[tuple[bool, str, Any]] = []  # (many, statement, params)

    def execute(self, statement: str, params: Sequence[Any] = ()) -> None:
        self._kept.append((False, statement, params))

    def executemany(self, statement: str, params_seq: Sequence[Sequence[Any]]) -> None:
        if params_seq:
            self._kept.append((True, statement, params_seq))

    def submit(self, statement: str, params: Sequence[Any] = ()
               ) -> Callable[[], list[dict[str, Any]]]:
        return self._reads.submit(statement, params)

    def fetchall(self) -> list[dict[str, Any]]:
        raise TypeError("a kept write has no rows yet: this read model's writes are not blind")

    fetchone = fetchall  # type: ignore[assignment]

    def run_in(self, tx: Tx) -> None:
        """Run the kept statements in ``tx``, in the order they were given."""
        for many, statement, params in self._kept:
            if many:
                tx.executemany(statement, params)
            else:
                tx.execute(statement, params)


def fold_outside_the_lock(db: Database, group: Sequence[Any], start: int,
                          events: Sequence[tuple[int, Any]]
                          ) -> tuple[WritesLater | None, list[Any]]:
    """On SQLite, apply ``events`` to the read models of ``group`` with blind writes in a
    read transaction (no write lock) and return their kept statements with the read models
    left to apply in the write transaction; elsewhere (PostgreSQL locks rows, not the
    database), or when none has blind writes, ``(None, group)``. Raises
    ``ProjectionConflictError`` when a read model of ``group`` is no longer at ``start``
    (another runner moved it), as the claim would (``check_at``)."""
    blind = [rm for rm in group if isinstance(rm, ReadModel) and rm.blind_writes]
    if not blind or db.dialect is not Dialect.SQLITE:
        return None, list(group)
    with db.transaction(commit=False) as reads:
        check_at(reads, [rm.name for rm in group], start)
        later = WritesLater(reads)
        apply_together(later, blind, events)
    return later, [rm for rm in group if rm not in blind]

