"""``vmledger audit verify``: replay every stream, check its hash chain, and compare every read
model with a fresh fold of the log (design.md, "Auditing").

Each difference names the stream (or read-model row) and the version where it was found.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Mapper, Notification

from domain import chain
from service.commands.application import VmLedger

BATCH = 1000


@dataclass(frozen=True)
class Difference:
    """One thing that did not hold: where (stream or read-model row, version) and what."""

    where: str
    version: int | None
    kind: str
    detail: str

    def __str__(self) -> str:
        at = f" version {self.version}" if self.version is not None else ""
        return f"{self.kind}: {self.where}{at}: {self.detail}"


def notifications(app: VmLedger, *, stop: int | None = None) -> Iterator[Notification]:
    """Every stored event in log order, read in batches (up to position ``stop``)."""
    position = 0
    while True:
        batch = app.recorder.select_notifications(position, BATCH, stop=stop,
                                                  inclusive_of_start=False)
        if not batch:
            return
        yield from batch
        position = batch[-1].id


def stored_fields(mapper: Mapper[Any], stored: Notification) -> dict[str, Any]:
    """An event's fields exactly as they were written: decoded, but not upcast."""
    state = stored.state
    if mapper.cipher:
        state = mapper.cipher.decrypt(state)
    if mapper.compressor:
        state = mapper.compressor.decompress(state)
    return mapper.transcoder.decode(state)


def verify_chains(app: VmLedger, progress: Callable[[int], None] | None = None
                  ) -> list[Difference]:
    """Check every stream's versions are contiguous from 1 and every event's ``chain``."""
    differences: list[Difference] = []
    heads: dict[UUID, tuple[int, str]] = {}
    count = 0
    for count, stored in enumerate(notifications(app), start=1):
        if progress and count % BATCH == 0:
            progress(BATCH)
        differences += check_link(app, stored, heads)
    if progress and count % BATCH:
        progress(count % BATCH)
    return differences


def check_link(app: VmLedger, stored: Notification, heads: dict[UUID, tuple[int, str]]
               ) -> list[Difference]:
    """Check one stored event against its stream's head so far (``heads``: stream → (version,
    chain hash), updated here): its version follows the head's and its ``chain`` links it."""
    stream = stored.originator_id
    version, previous = heads.get(stream, (0, chain.GENESIS))
    where = f"stream {stream}"
    differences = []
    gap = stored.originator_version != version + 1
    if gap:
        differences.append(Difference(
            where, version + 1, "missing",
            f"the stream goes from version {version} to {stored.originator_version}"))
    try:
        fields = stored_fields(app.mapper, stored)
    except Exception as error:  # noqa: BLE001 - any undecodable event is a finding
        differences.append(Difference(where, stored.originator_version, "undecodable",
                                      f"{type(error).__name__}: {error}"))
        heads[stream] = (stored.originator_version, "")
        return differences
    recorded = fields.get("chain")
    expected = chain.link(previous, stream, stored.originator_version, stored.topic, fields)
    # after a gap the event links to one that is not there: the gap is the finding, and the
    # chain is checked on from this event's own link
    if recorded != expected and not gap:
        differences.append(Difference(
            where, stored.originator_version, "tampered",
            "the event's content or its link to the previous event was changed"))
    heads[stream] = (stored.originator_version, recorded or expected)
    return differences


def scratch_directory() -> Path:
    """Where fresh folds are built (removed by the caller)."""
    return Path(tempfile.mkdtemp(prefix="vmledger-audit-"))


def verify_read_models(services: Any, progress: Callable[[int], None] | None = None
                       ) -> list[Difference]:
    """Fold the log afresh into a scratch SQLite database, up to the position each live read
    model has reached, and compare the two row by row (bytes columns, the folded snapshots,
    are left out: the rendered columns derive from them)."""
    from eventsourcing.sqlite import SQLiteDatastore

    from projections.db import Database
    from service.container import read_models

    directory = scratch_directory()
    datastore = SQLiteDatastore(str(directory / "fresh.db"))
    try:
        scratch = Database(datastore)
        differences: list[Difference] = []
        for fresh in read_models(services.app):
            stop, live = _live(services.db, fresh)
            with scratch.transaction() as tx:
                for statement in fresh.create_statements(scratch):
                    tx.execute(statement)
            try:
                _fold(services.app, fresh, scratch, stop, progress)
            except Exception as error:  # noqa: BLE001 - a log that cannot be folded is a finding
                differences.append(Difference(fresh.name, None, "fold",
                                              f"a fresh fold failed: {error}"))
            with scratch.transaction(commit=False) as tx:
                for table in fresh.tables:
                    differences += compare(table, live[table], _rows(tx, table))
        return differences
    finally:
        datastore.close()
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()


def _fold(app: VmLedger, read_model: Any, db: Any, stop: int,
          progress: Callable[[int], None] | None) -> None:
    batch: list[tuple[int, Any]] = []
    for stored in notifications(app, stop=stop):
        batch.append((stored.id, app.mapper.to_domain_event(stored)))
        if len(batch) == BATCH:
            with db.transaction() as tx:
                read_model.apply(tx, batch)
            if progress:
                progress(len(batch))
            batch = []
    if batch:
        with db.transaction() as tx:
            read_model.apply(tx, batch)
        if progress:
            progress(len(batch))


def _live(db: Any, read_model: Any) -> tuple[int, dict[str, dict[str, dict[str, Any]]]]:
    """The live read model's tracking position and rows, read in one snapshot of the database,
    so that a runner applying batches meanwhile cannot move one apart from the other (a verify
    on a busy service reported rows newer than the position it folded to)."""
    from projections.db import Dialect
    from projections.runner import ProjectionRunner

    with db.transaction(commit=False) as tx:
        if tx.dialect is Dialect.POSTGRES:  # READ COMMITTED would see each statement anew
            tx.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        position = ProjectionRunner.position_in(tx, read_model.name)
        return position, {table: _rows(tx, table) for table in read_model.tables}


def _rows(tx: Any, table: str) -> dict[str, dict[str, Any]]:
    tx.execute(f"SELECT * FROM {table}")  # table names are the read models' own
    rows = tx.fetchall()
    plain = [{k: v for k, v in row.items() if not isinstance(v, bytes | memoryview)}
             for row in rows]
    # Keyed by the first column (the primary key of every table but the tags', whose key is
    # its first two columns).
    width = 1 if len({next(iter(r.values())) for r in plain}) == len(plain) else 2
    return {"/".join(str(v) for v in list(r.values())[:width]): r for r in plain}


def compare(table: str, live: dict[str, dict[str, Any]], fresh: dict[str, dict[str, Any]]
             ) -> list[Difference]:
    """The differences between a read-model table's ``live`` rows and a ``fresh`` fold's
    (by key, without their bytes columns)."""
    differences = []
    for key in sorted(set(live) | set(fresh)):
        have, want = live.get(key), fresh.get(key)
        version = (want or have or {}).get("version")
        where = f"{table} row {key}"
        if have is None:
            differences.append(Difference(where, version, "read model", "missing from the "
                                          "read model, present in a fresh fold"))
        elif want is None:
            differences.append(Difference(where, version, "read model", "present in the read "
                                          "model, absent from a fresh fold"))
        elif have != want:
            columns = sorted(c for c in set(have) | set(want) if have.get(c) != want.get(c))
            differences.append(Difference(where, version, "read model",
                                          f"differs from a fresh fold in {', '.join(columns)}"))
    return differences
