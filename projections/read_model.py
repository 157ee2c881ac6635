"""The read model contract: tables, and how a batch of events changes them (the runner,
``projections.runner``, applies batches; ``projections.rebuild`` builds copies beside)."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eventsourcing.persistence import Transcoder

from projections.db import Database, Tx, declared_columns
from projections.kept_folds import KeptFolds


class ReadModel(ABC):
    """A read model: tables, and how a batch of events changes them (``apply``, or ``read``
    then ``write``).

    ``tables`` are the live tables' names. Every statement (DDL and ``apply``) names its tables
    through ``table()`` and its indexes through ``index()``, so a copy made by ``beside()``
    writes into shadow tables (``vm_view__rebuild``) with their own indexes, tracked under its
    own name: how a rebuild builds beside the live tables while they keep serving.
    """

    name: str
    tables: tuple[str, ...]
    suffix: str = ""
    # Indexes (names as given to ``index()``) that ``apply``'s own statements look rows up
    # by; a rebuild makes the others only once the tables are built (projections.rebuild).
    apply_indexes: tuple[str, ...] = ()
    # About how much CPU applying the log costs this read model, against the others': a
    # parallel rebuild splits read models over its processes by it (projections.
    # parallel_rebuild.split).
    rebuild_weight: float = 1.0
    # Whether ``write`` (or ``apply``) only sends statements and reads no rows back: then on
    # SQLite a batch is folded before the write lock is taken (projections.writes_later).
    blind_writes: bool = False
    # What the last committed batch folded, for the next batch from where it ended (None:
    # nothing is kept; projections.kept_folds)
    kept: KeptFolds | None = None

    def table(self, name: str) -> str:
        """The real name of table ``name`` (one of ``tables``) for this instance."""
        return name + self.suffix

    def index(self, name: str) -> str:
        """The real name of index ``name`` (index names are global in both backends)."""
        return name + self.suffix

    def real_tables(self) -> list[str]:
        """The real names of every table, in ``tables`` order."""
        return [self.table(name) for name in self.tables]

    def declared_columns(self, db: Database) -> dict[str, list[str]]:
        """Each of its tables and the columns its ``create_statements`` declare for it."""
        return dict(table for table in map(declared_columns, self.create_statements(db))
                    if table is not None)

    def stale_tables(self, tx: Tx, db: Database) -> list[str]:
        """Its tables that are missing, or lack a column its ``create_statements`` declare
        (made by an older version), read in ``tx``."""
        return self.stale_among(db.columns_of(tx, self.real_tables()), db)

    def stale_among(self, present: Mapping[str, set[str]], db: Database) -> list[str]:
        """``stale_tables`` given each of its tables' ``present`` columns, as
        ``Database.columns_of`` reads them (one query for several read models' tables)."""
        declared = self.declared_columns(db)
        return [table for table in self.real_tables()
                if not present[table] or any(c not in present[table]
                                             for c in declared.get(table, ()))]

    @classmethod
    def fresh(cls, transcoder: Transcoder) -> ReadModel:
        """A new instance over an event store whose events ``transcoder`` encodes (a model
        that keeps encoded state, ``VmView``'s folded VM, needs it; the others do not)."""
        return cls()

    def beside(self, suffix: str) -> ReadModel:
        """A copy writing into ``<table><suffix>`` tables, tracked as ``<name><suffix>``."""
        shadow = copy.copy(self)
        shadow.suffix = self.suffix + suffix
        shadow.name = self.name + suffix
        if self.kept is not None:  # its rows are not the live ones
            shadow.kept = KeptFolds(self.kept.bound)
        return shadow

    @abstractmethod
    def create_statements(self, db: Database) -> list[str]:
        """DDL creating the tables and indexes (idempotent), named through ``table()`` and
        ``index()``."""

    def apply(self, tx: Tx, events: Sequence[tuple[int, Any]]) -> None:
        """Apply ``(position, domain event)`` pairs in log order, inside ``tx``. A read model
        with a ``read`` of its own has this done for it (``read``, then ``write``); one
        without overrides it."""
        answer = self.read(tx, events)
        if answer is None:
            raise NotImplementedError(f"{type(self).__name__} has neither apply nor read")
        self.write(tx, events, answer())

    def read(self, tx: Tx, events: Sequence[tuple[int, Any]]) -> Callable[[], Any] | None:
        """Send the queries of stored rows that applying ``events`` needs, and return a
        function giving their answer for ``write`` (``Tx.submit``, ``Tx.submit_rows_by_key``),
        or None (the default) when ``apply`` does it all. The runner sends the reads of every
        read model of a batch before it reads any answer: on PostgreSQL one round trip for
        all of them (docs/performance.md, P5). A read sees the tables as they were before the
        batch: no read model reads another's tables."""
        return None

    def write(self, tx: Tx, events: Sequence[tuple[int, Any]], stored: Any) -> None:
        """Apply ``events`` in log order inside ``tx``, given ``stored``, the answer of the
        function ``read`` returned (a read model with a ``read`` implements this)."""
        raise NotImplementedError(f"{type(self).__name__} has a read but no write")

    def batch_begins(self, start: int) -> None:
        """The runner is about to apply, in one transaction, the batch after tracking position
        ``start`` (its ``read`` and ``write``, or ``apply``, follow). A read model that keeps
        what it folded between batches (``kept``: ``VmView``'s VMs, ``JobView``'s jobs) may
        use what it kept at ``start``: the batch commits only if the tracking row is still
        there (``batch_ended``)."""
        if self.kept is not None:
            self.kept.begin(start)

    def batch_ended(self, position: int | None) -> None:
        """The batch begun by ``batch_begins`` committed with this read model at ``position``,
        or (None) did not: its claim was refused, or it failed and was rolled back."""
        if self.kept is not None:
            self.kept.end(position)


class EventKinds:
    """A test of events against ``kinds`` (event classes) remembered per event class, for a
    read model that wants a few kinds out of every batch: ``isinstance`` against the domain's
    event classes (whose metaclass is not ``type``) costs 80-100 ns a class tested, 400-500 ns
    against a tuple of several, on every event of batches of thousands (docs/performance.md,
    P3); a remembered answer costs a dictionary lookup."""

    def __init__(self, *kinds: type):
        self.kinds = kinds
        self._answers: dict[type, bool] = {}

    def __contains__(self, event: object) -> bool:
        """Whether ``event`` is an instance of one of ``kinds``."""
        kind = type(event)
        answer = self._answers.get(kind)
        if answer is None:
            answer = self._answers[kind] = issubclass(kind, self.kinds)
        return answer

    def of(self, events: Sequence[tuple[int, Any]]) -> list[tuple[int, Any]]:
        """The ``(position, event)`` pairs of ``events`` whose event is of ``kinds``, in
        order."""
        answers = self._answers
        for kind in {type(event) for _, event in events} - answers.keys():
            answers[kind] = issubclass(kind, self.kinds)
        return [pair for pair in events if answers[type(pair[1])]]


def apply_together(tx: Tx, read_models: Sequence[ReadModel],
                   events: Sequence[tuple[int, Any]]) -> None:
    """Apply ``events`` to every read model of ``read_models`` inside ``tx``: every ``read``
    is sent before any answer is read (one round trip for all of them in a PostgreSQL
    pipeline), then each read model writes, in order (docs/performance.md, P5). A read model
    that is not a ``ReadModel`` but has an ``apply`` (a test's) is applied so."""
    answers = [(read_model, _sent_read(read_model, tx, events)) for read_model in read_models]
    for read_model, answer in answers:
        if answer is None:
            read_model.apply(tx, events)
        else:
            read_model.write(tx, events, answer())


def batches_begin(read_models: Sequence[Any], start: int) -> None:
    """``batch_begins(start)`` of each of ``read_models`` that has one (a test's may not)."""
    for read_model in read_models:
        if isinstance(read_model, ReadModel):
            read_model.batch_begins(start)


def batches_ended(read_models: Sequence[Any], position: int | None) -> None:
    """``batch_ended(position)`` of each of ``read_models`` that has one."""
    for read_model in read_models:
        if isinstance(read_model, ReadModel):
            read_model.batch_ended(position)


def _sent_read(read_model: Any, tx: Tx, events: Sequence[tuple[int, Any]]
               ) -> Callable[[], Any] | None:
    read = getattr(read_model, "read", None)
    return None if read is None else read(tx, events)
