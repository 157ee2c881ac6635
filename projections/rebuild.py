"""Rebuilding a read model from position 1 while it keeps serving: build beside, then switch.

1. **Prepare.** Drop what an interrupted rebuild may have left (the shadow tables and the
   shadow's tracking row), then create the shadow tables ``<table>__rebuild`` with their
   indexes ``<index>__rebuild``: the read model's own DDL, named through ``ReadModel.table``
   and ``ReadModel.index``; only the indexes its ``apply`` needs
   (``ReadModel.apply_indexes``) are made now, the others after the build.
2. **Build.** Apply the log from position 1 to the shadow in batches of the runner's
   ``rebuild_batch_size``, each in one transaction with the shadow's own tracking row
   ``<name>__rebuild``, until the head. Several read models rebuilt together share each batch
   (one read and one decoding of the log); a parallel rebuild (``projections.
   parallel_rebuild``) builds groups of them so in several processes, and switches them only
   once every group is built. Then the remaining indexes are made, each from the
   whole table at once rather than row by row (docs/performance.md, P3). The live tables keep
   serving reads, and the live runner keeps them up to date, all along.
3. **Switch**, in one transaction: hold the live tracking row (PostgreSQL: ``FOR UPDATE``;
   SQLite: the database write lock), so no runner moves it; apply to the shadow whatever the
   live read model already has and the shadow has not (a switch never moves a read model
   back past an event, which read-your-writes relies on; a live position past every event
   the log holds up to it, as an edit of ``projection_tracking`` leaves one past the head,
   is discarded, and the shadow switched at the last event it applied, with a warning);
   give the shadow tables the live ones' owner and grants (``projections.privileges``: a
   role the operator granted the live tables keeps its access); drop the live tables;
   rename the shadow tables to the live names; give their indexes the
   live names (PostgreSQL renames them; SQLite cannot rename an index, so they are created
   again under the live names from the same DDL); move the tracking row to the shadow's
   position and delete the shadow's.

Readers never see a half-built table: before the commit they read the old tables, after it
the new ones. A live runner that read its position before the switch fails its
compare-and-set afterwards (``ProjectionConflictError``), re-reads and goes on from the
switched position. One rebuild of a given read model at a time: a second one started meanwhile
would drop the first one's shadow tables.

A read model whose DDL does not name its tables through ``table()`` cannot be built beside:
it is rebuilt in place (emptied, then replayed; readers see it fill up again), with a warning.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Protocol

from eventsourcing.persistence import Notification

from projections import privileges
from projections.collector import fewer_young_collections
from projections.db import Database, Dialect, Tx
from projections.read_model import ReadModel

SUFFIX = "__rebuild"
# A plain index's DDL, as every read model writes it, and the index's (real) name
_PLAIN_INDEX = re.compile(r"CREATE INDEX (?:IF NOT EXISTS )?(?P<name>\w+) ON ")

log = logging.getLogger(f"vmledger.{__name__}")


class Runner(Protocol):
    """What a rebuild needs of the runner (``projections.runner.ProjectionRunner``, which
    calls ``rebuild_beside``; a protocol, so the two modules do not import each other)."""

    db: Database
    source: Any  # the runner's NotificationSource
    read_models: dict[str, ReadModel]
    batch_size: int
    rebuild_batch_size: int

    def reset(self, names: Iterable[str]) -> None: ...

    def catch_up_models(self, read_models: Sequence[ReadModel],
                        progress: Callable[[int], None] | None = None, *,
                        batch_size: int | None = None) -> int: ...

    def position_in(self, tx: Tx, name: str) -> int: ...

    def decode(self, notifications: Sequence[Notification]) -> list[tuple[int, Any]]: ...

    def head(self) -> int: ...


def rebuild_beside(runner: Runner, lives: Sequence[ReadModel],
                   progress: Callable[[int], None] | None = None) -> int:
    """Rebuild ``lives`` from position 1 beside their tables, built together (each batch is
    read and decoded once for all of them), then switch each; return how many events were
    applied in all. ``progress(n)`` is called after each batch of the build with its ``n``
    log events."""
    total = build_beside(runner, lives, progress)
    return total + switch_all(runner, lives)


def build_beside(runner: Runner, lives: Sequence[ReadModel],
                 progress: Callable[[int], None] | None = None) -> int:
    """Steps 1 and 2 for ``lives``, built together: prepare their shadows, apply the log to
    them up to the head and make their deferred indexes (a read model that cannot be built
    beside is emptied and replayed in place instead); return how many events were applied
    in all. ``switch_all`` then switches them."""
    in_place, beside = _split_in_place(runner.db, lives)
    for live in in_place:
        log.warning("%s does not name its tables through ReadModel.table(): rebuilt in place, "
                    "so it is empty until the rebuild ends", live.name)
    runner.reset([live.name for live in in_place])
    shadows = [live.beside(SUFFIX) for live in beside]
    deferred = [deferred_indexes(runner.db, shadow) for shadow in shadows]
    for shadow, later in zip(shadows, deferred):
        prepare(runner.db, shadow, deferred=later)
    with fewer_young_collections():  # a fifth of a rebuild's CPU (projections.collector)
        total = runner.catch_up_models(in_place + shadows, progress,
                                       batch_size=runner.rebuild_batch_size)
    for later in deferred:
        make_deferred_indexes(runner.db, later)
    return total


def switch_all(runner: Runner, lives: Sequence[ReadModel]) -> int:
    """Step 3: switch each of ``lives`` built beside (``build_beside``) to its shadow, each
    in its own transaction; return how many events the shadows still needed first."""
    _, beside = _split_in_place(runner.db, lives)
    return sum(switch(runner, live, live.beside(SUFFIX)) for live in beside)


def _split_in_place(db: Database, lives: Sequence[ReadModel]
                    ) -> tuple[list[ReadModel], list[ReadModel]]:
    """``lives`` as (rebuilt in place, built beside): in place when the shadow's DDL is the
    live one's (its tables are not named through ``table()``)."""
    in_place = [live for live in lives
                if live.beside(SUFFIX).create_statements(db) == live.create_statements(db)]
    return in_place, [live for live in lives if live not in in_place]


def prepare(db: Database, shadow: ReadModel, *, deferred: Collection[str] = ()) -> None:
    """Empty shadow tables and no shadow tracking row, in one transaction; without the
    ``deferred`` statements of its DDL (``deferred_indexes``: ``make_deferred_indexes`` makes
    them later)."""
    with db.transaction() as tx:
        for table in shadow.real_tables():  # table names are ours, never input
            tx.execute(f"DROP TABLE IF EXISTS {table}")
        tx.execute("DELETE FROM projection_tracking WHERE name = ?", (shadow.name,))
        for statement in shadow.create_statements(db):
            if statement not in deferred:
                tx.execute(statement)


def deferred_indexes(db: Database, read_model: ReadModel) -> list[str]:
    """The DDL of ``read_model``'s indexes that its ``apply`` does not need: plain (not
    unique: a unique index is a rule the rows must keep while they are written) and not
    named in ``apply_indexes``. Maintaining them row by row is a large share of a rebuild's
    database work; one ``CREATE INDEX`` over the finished table costs far less. Raises
    ``ValueError`` for a name in ``apply_indexes`` that no plain index of the DDL has (it
    would otherwise be deferred unnoticed, and the build look rows up without it)."""
    needed = {read_model.index(name) for name in read_model.apply_indexes}
    deferred, kept = [], set()
    for statement in read_model.create_statements(db):
        made = _PLAIN_INDEX.match(statement)
        if made is None:
            continue
        if made["name"] in needed:
            kept.add(made["name"])
        else:
            deferred.append(statement)
    if needed - kept:
        raise ValueError(f"{read_model.name}: apply_indexes names no plain index of its DDL: "
                         f"{', '.join(sorted(needed - kept))}")
    return deferred


def make_deferred_indexes(db: Database, deferred: Sequence[str]) -> None:
    """Create the indexes ``prepare`` left out (its ``deferred``), in one transaction."""
    with db.transaction() as tx:
        for statement in deferred:
            tx.execute(statement)


def switch(runner: Runner, live: ReadModel, shadow: ReadModel) -> int:
    """Put the shadow tables in the live ones' place and move the tracking row, in one
    transaction; return how many events the shadow still needed to apply first.

    The shadow first applies the log's events up to the live position. When the log holds
    none up to it (a position past the log's head, ``projections.past_head``), the shadow
    is switched at the last event it applied, with a warning (``_discarded``, logged once
    the switch is committed: a switch that fails, rolled back, switched nothing): the
    rebuild is the documented fix for such a read model (docs/operations.md, ``tracking``)."""
    db = runner.db
    applied = 0
    discarded: tuple[str, int, int, int] | None = None
    with db.transaction() as tx:
        live_position = _hold(tx, live.name)
        position = runner.position_in(tx, shadow.name)
        while position < live_position:
            notifications = runner.source.select_notifications(
                position, runner.batch_size, stop=live_position, inclusive_of_start=False)
            if not notifications:
                break  # the log holds nothing more up to the live position
            shadow.apply(tx, runner.decode(notifications))
            position = notifications[-1].id
            applied += len(notifications)
        if position < live_position:  # logged once the switch is committed
            discarded = (live.name, live_position, position, runner.head())
        for table in live.tables:  # the grants of the tables they replace (operator tester)
            privileges.carry(tx, live.table(table), shadow.table(table))
        for table in live.real_tables():
            tx.execute(f"DROP TABLE IF EXISTS {table}")
        for table in live.tables:
            tx.execute(f"ALTER TABLE {shadow.table(table)} RENAME TO {live.table(table)}")
        _name_indexes(tx, db, live)
        tx.execute("UPDATE projection_tracking SET position = ? WHERE name = ?",
                   (position, live.name))
        tx.execute("DELETE FROM projection_tracking WHERE name = ?", (shadow.name,))
    if discarded is not None:
        _discarded(*discarded)
    return applied


def _discarded(name: str, live_position: int, position: int, head: int) -> None:
    """Log that read model ``name``'s live position, past every event the log holds up to
    it, is given up for the shadow's ``position`` (the last of those events).

    Only an edit of ``projection_tracking``, a log restored older than the read models, or
    events deleted behind the service's back put a live position there (the runner only ever
    moves one to an event it applied). The shadow holds every event of the log up to it, so
    its position is the right one: the runner goes on from there and skips nothing; the live
    one, kept, would skip for good the events appended up to it (``projections.past_head``),
    and catching up to it ended the switch in ``LookupError`` (tester, bug 1)."""
    where = (f"past the log's head {head}" if live_position > head
             else f"but the log holds no event after {position} up to it")
    log.warning("read model %s was at position %s, %s: switched at position %s, the last event "
                "the log holds up to it; the position it was at is discarded",
                name, live_position, where, position)


def _hold(tx: Tx, name: str) -> int:
    """Lock read model ``name``'s tracking row (creating it at 0) and return its position.
    The INSERT comes first so that on SQLite the write lock is taken before anything is read."""
    tx.execute("INSERT INTO projection_tracking (name, position) VALUES (?, 0) "
               "ON CONFLICT (name) DO NOTHING", (name,))
    lock = " FOR UPDATE" if tx.dialect is Dialect.POSTGRES else ""
    tx.execute(f"SELECT position FROM projection_tracking WHERE name = ?{lock}", (name,))
    row = tx.fetchone()
    assert row is not None
    return int(row["position"])


def _name_indexes(tx: Tx, db: Database, live: ReadModel) -> None:
    """Give the indexes of the just-renamed tables their live names."""
    if tx.dialect is Dialect.POSTGRES:
        for table in live.real_tables():
            tx.execute("SELECT indexname FROM pg_indexes "
                       "WHERE schemaname = current_schema() AND tablename = ?", (table,))
            for row in tx.fetchall():
                name = row["indexname"]
                if SUFFIX in name:  # includes the primary key's, <table>__rebuild_pkey
                    tx.execute(f"ALTER INDEX {name} RENAME TO {name.replace(SUFFIX, '')}")
        return
    for table in live.real_tables():
        tx.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
                   "AND sql IS NOT NULL", (table,))  # not the primary keys' autoindexes
        for row in tx.fetchall():
            if SUFFIX in row["name"]:
                tx.execute(f"DROP INDEX {row['name']}")
    for statement in live.create_statements(db):  # the tables exist: only indexes are made
        tx.execute(statement)
