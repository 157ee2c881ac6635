"""Read models compared with a fresh fold of the whole log, for ``vmledger audit verify``.

Each read model is folded afresh into a scratch SQLite database. Its rows are compared with
the live ones at the position the live read model has reached (read in the same snapshot of
the database as its rows); then the fold goes on to the log's head, so that an event the
read models have not reached, or could not apply, is checked too (tester B: a stuck tail
passed as "held").

An event a fold cannot apply (undecodable, a gap, a transition its state refuses) is one
``fold`` finding naming its stream and version; that stream's later events and the rows
that name it are left out of the comparison, and every other stream is compared as usual
(tester B, B5: one bad stream had every row of its read model reported). The rows are left
out of every read model, not only of those whose fold failed: a read model that does not
fold the VM (``analytics`` keeps a row per VM from its ``Created`` on) can take a damaged
stream without failing, and its rows naming it were compared, "absent from a fresh fold",
beside the finding that said they were left out (tester, bug 2). Each read model is folded
on its own, up to its own failure, and the finding names the earliest version any failed
at (``_merge``), whatever order the read models come in; a read model's differences are
kept with the streams its rows name (``_compared``), and those naming a stream that a later
read model's fold found damaged are dropped once every fold is done.

Rows are keyed by their table's primary key, the same columns on both sides (B4: a key
width chosen per side from the data made one difference name every VM).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from service.audit.verify import (
    BATCH,
    Difference,
    comparable,
    compare_row,
    notifications,
    scratch_directory,
)

Rows = dict[str, dict[str, Any]]
# stream -> (the version its fold failed at, the read models that failed, the first error)
Broken = dict[UUID, tuple[int, list[str], str]]


def verify_read_models(services: Any, progress: Callable[[int], None] | None = None,
                       notes: list[str] | None = None) -> list[Difference]:
    """Every read-model row that differs from a fresh fold of the log (bytes columns, the
    folded states the runner folds the next event onto, decoded: ``comparable``), and one
    ``fold`` difference for each stream a fresh fold could not apply, and a ``tracking`` one
    for each read model whose position is past the log's head, or behind its rows (in place
    of its rows' differences: ``_behind_its_rows``). The rows naming a stream any read
    model's fresh fold could not apply are left out of every read model's comparison: that
    stream's ``fold`` difference stands for them. ``notes`` gets a line for each read model
    behind the log's head (its rows were compared where it stands)."""
    from eventsourcing.sqlite import SQLiteDatastore

    from projections.db import Database
    from service.container import read_models

    directory = scratch_directory()
    datastore = SQLiteDatastore(str(directory / "fresh.db"))
    broken: Broken = {}
    # each difference found, with the streams its rows name (none for a ``tracking`` one)
    differences: list[tuple[Difference, frozenset[str]]] = []
    transcoder = services.app.mapper.transcoder
    try:
        scratch = Database(datastore)
        for fresh in read_models(services.app.mapper.transcoder):
            stop, live = _live(services.db, fresh)
            # read after the position: the head only grows, so a position past it was past
            # the head when it was read too (tester D, bug 5: its runner skips the events
            # appended up to that position)
            log_head = services.app.recorder.max_notification_id() or 0
            if stop > log_head:
                differences.append((past_head(fresh.name, stop, log_head), frozenset()))
            with scratch.transaction() as tx:
                for statement in fresh.create_statements(scratch):
                    tx.execute(statement)
                keys = {table: primary_key(tx, table) for table in fresh.tables}
            mine: Broken = {}
            _fold(services.app, fresh, scratch, mine, progress, after=0, stop=stop)
            # left out already: the streams this fold and the ones before it found damaged
            left_out = {**broken, **mine}
            live_rows = {table: _keyed(live[table], keys[table], left_out, transcoder)
                         for table in fresh.tables}
            at_stop = _scratch_rows(scratch, fresh, keys, left_out, transcoder)
            found = [named for table in fresh.tables
                     for named in _compared(table, live_rows[table], at_stop[table])]
            ahead = _ahead(live_rows, at_stop, stop)
            head = _fold(services.app, fresh, scratch, mine, progress, after=stop, stop=None)
            behind = _behind_its_rows(fresh.name, stop, ahead, [d for d, _ in found],
                                      _scratch_rows(scratch, fresh, keys, {**broken, **mine},
                                                    transcoder)) if ahead else None
            differences += [(behind, frozenset())] if behind else found
            if notes is not None and head > stop:
                notes.append(f"{fresh.name} is at log position {stop}, behind the head "
                             f"({head}): its rows were compared at {stop}, the events after "
                             "it only folded")
            for stream, (version, _, error) in mine.items():
                _merge(broken, stream, version, fresh.name, error)
        damaged = {str(stream) for stream in broken}
        return [difference for difference, names in differences if not names & damaged] + [
            Difference(f"stream {stream}", version, "fold",
                       f"a fresh fold of {', '.join(models)} failed: {error}")
            for stream, (version, models, error) in broken.items()]
    finally:
        datastore.close()
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()


def _merge(broken: Broken, stream: UUID, version: int, name: str, error: str) -> None:
    """Add read model ``name``'s fold failure of ``stream`` at ``version`` to ``broken``:
    the finding names every read model that failed, and the earliest version any failed at
    with its error (the read models are folded in whatever order they are served)."""
    first, names, said = broken.get(stream, (version, [], error))
    if version < first:
        first, said = version, error
    broken[stream] = (first, [*names, name], said)


def _compared(table: str, live: Rows, fresh: Rows
              ) -> list[tuple[Difference, frozenset[str]]]:
    """``compare``'s differences of ``table``'s ``live`` and ``fresh`` rows, each with the
    values its two rows hold, as text (``_names``): the streams a read model's row names
    are among its values, whatever its columns."""
    found = []
    for key in sorted(set(live) | set(fresh)):
        have, want = live.get(key), fresh.get(key)
        difference = compare_row(table, key, have, want)
        if difference is not None:
            found.append((difference, _names(have) | _names(want)))
    return found


def _names(row: dict[str, Any] | None) -> frozenset[str]:
    """The values of ``row`` (``comparable``) as text: the streams it names among them."""
    return frozenset(str(value) for value in (row or {}).values())


def past_head(name: str, position: int, head: int) -> Difference:
    """The finding for read model ``name`` whose tracking ``position`` is past the log's
    ``head``: its rows may still equal a fold, but it would skip every event appended up to
    its position, so it is rebuilt rather than trusted."""
    return Difference(f"read model {name}", None, "tracking",
                      f"is at position {position}, past the log's head {head}; "
                      f"`vmledger rebuild {name}` rebuilds it")


def _scratch_rows(scratch: Any, fresh: Any, keys: dict[str, list[str]], broken: Broken,
                  transcoder: Any) -> dict[str, Rows]:
    """The fresh fold's rows of every table of read model ``fresh``, keyed."""
    with scratch.transaction(commit=False) as tx:
        return {table: _keyed(_select(tx, table), keys[table], broken, transcoder)
                for table in fresh.tables}


def _ahead(live: dict[str, Rows], fresh: dict[str, Rows], stop: int
           ) -> list[tuple[str, str, dict[str, Any]]]:
    """(table, key, live row) of the live rows that look newer than the fresh fold at the
    read model's position ``stop``: a ``position`` column past it (``job_view``'s queued job),
    or a ``version`` the fold there has not reached."""
    found = []
    for table, rows in live.items():
        for key, row in rows.items():
            want = fresh[table].get(key)
            if (isinstance(row.get("position"), int) and row["position"] > stop) or (
                    isinstance(row.get("version"), int)
                    and (want is None or row["version"] > (want.get("version") or 0))):
                found.append((table, key, row))
    return found


def _behind_its_rows(name: str, stop: int, ahead: list[tuple[str, str, dict[str, Any]]],
                     found: list[Difference], at_head: dict[str, Rows]) -> Difference | None:
    """The ``tracking`` finding for read model ``name`` whose rows the log reaches only after
    its tracking position ``stop`` (``ahead``, confirmed by the fresh fold at the head
    ``at_head``), or None. Its tracking row was set back (or its tables restored newer than
    it): its runner would apply those events again (docs/operations.md). The rows that differ
    at ``stop`` (``found``) follow from it and are counted, not listed: the audit named 13
    rows "absent from a fresh fold" and never the tracking (auditor tester).

    Only a row the log reaches later says so: the fold at the head has it, at a version
    (``version``) and a log position (``position``) at least the row's. A row whose version or
    position no event of its stream holds (past the fold at the head) was edited, and is found
    as such: one ``job_view`` row's ``position`` edited was said to be the tracking row behind
    its rows, though that row was untouched (auditor tester)."""
    for table, key, row in ahead:
        fold = at_head[table].get(key)
        if fold is None or any(isinstance(row.get(column), int)
                               and row[column] > (fold.get(column) or 0)
                               for column in ("version", "position")):
            continue  # not a row the log reaches later: an edited row, found as such
        version = f" at version {row['version']}" if "version" in row else ""
        return Difference(f"read model {name}", None, "tracking",
                          f"is at position {stop}, behind its rows: {table} row {key}{version} "
                          f"holds events after that position ({len(found)} rows differ from "
                          f"a fresh fold at {stop}, not listed); `vmledger rebuild {name}` "
                          "rebuilds it")
    return None


def primary_key(tx: Any, table: str) -> list[str]:
    """The columns of ``table``'s primary key (a scratch SQLite table), in key order; every
    column when it has none."""
    tx.execute(f"PRAGMA table_info({table})")  # table names are the read models' own
    columns = tx.fetchall()
    key = sorted((c for c in columns if c["pk"]), key=lambda c: c["pk"])
    return [c["name"] for c in key or columns]


def _fold(app: Any, read_model: Any, db: Any, broken: Broken,
          progress: Callable[[int], None] | None, *, after: int, stop: int | None) -> int:
    """Apply the events after position ``after`` (up to ``stop``, or the head) to
    ``read_model`` in ``db``, leaving out the streams in ``broken`` and adding those whose
    event it cannot apply; returns the last position read."""
    batch: list[tuple[int, Any]] = []
    last = after
    for stored in notifications(app, start=after, stop=stop):
        last = stored.id
        if stored.originator_id in broken:
            continue
        try:
            batch.append((stored.id, app.mapper.to_domain_event(stored)))
        except Exception as error:  # noqa: BLE001 - an undecodable event is a finding
            _break(broken, read_model, stored.originator_id, stored.originator_version, error)
        if len(batch) == BATCH:
            _apply(read_model, db, batch, broken, progress)
            batch = []
    if batch:
        _apply(read_model, db, batch, broken, progress)
    return last


def apply_finding_broken(read_model: Any, db: Any, batch: list[tuple[int, Any]],
                         broken: Broken) -> None:
    """Apply ``batch`` to ``read_model`` in ``db`` as the audit's folds do: the streams in
    ``broken`` left out, and those whose event it cannot apply added (the console's audit of
    a few VMs: service/audit/streams.py)."""
    for start in range(0, len(batch), BATCH):
        _apply(read_model, db, [(p, e) for p, e in batch[start:start + BATCH]
                                if e.originator_id not in broken], broken, None)


def _apply(read_model: Any, db: Any, batch: list[tuple[int, Any]], broken: Broken,
           progress: Callable[[int], None] | None) -> None:
    try:
        with db.transaction() as tx:
            read_model.apply(tx, batch)
    except Exception:  # noqa: BLE001 - found again below, event by event
        # the batch rolled back: apply it one event at a time to find the ones that fail,
        # and leave their streams out from there on
        for position, event in batch:
            if event.originator_id in broken:
                continue
            try:
                with db.transaction() as tx:
                    read_model.apply(tx, [(position, event)])
            except Exception as error:  # noqa: BLE001 - a stream that cannot be folded
                _break(broken, read_model, event.originator_id, event.originator_version,
                       error)
    if progress:
        progress(len(batch))


def _break(broken: Broken, read_model: Any, stream: UUID, version: int,
           error: Exception) -> None:
    break_stream(broken, read_model.name, stream, version, error)


def break_stream(broken: Broken, name: str, stream: UUID, version: int,
                 error: Exception) -> None:
    """Put ``stream`` in ``broken`` at ``version``, which ``name`` could not apply, unless it
    is already there."""
    broken.setdefault(stream, (version, [name], _worded(error)))


def _worded(error: Exception) -> str:
    """What ``error`` says of the stream, in the audit's words: a key the scratch database
    already holds is an event applied twice (repeated, or moved from another stream), which
    SQLite words as "UNIQUE constraint failed: job_view.uuid" (auditor tester)."""
    text = str(error) or type(error).__name__
    marker = "UNIQUE constraint failed: "
    # the library's SQLite datastore raises its own IntegrityError (not sqlite3's) with
    # SQLite's words; the scratch database is always SQLite
    integrity = any(cls.__name__ == "IntegrityError" for cls in type(error).__mro__)
    if integrity and text.startswith(marker):
        columns = ", ".join(c.split(".", 1)[-1] for c in text[len(marker):].split(", "))
        table = text[len(marker):].split(".", 1)[0]
        return (f"it would make a second {table} row of the same {columns}: an event "
                "repeated, or moved from another stream")
    return text


def _keyed(rows: list[dict[str, Any]], key: list[str], broken: Broken, transcoder: Any
           ) -> Rows:
    """``rows`` by their primary key, each ``comparable``, without the rows that name a
    stream in ``broken`` (its fold stopped: that stream is the finding)."""
    left_out = {str(stream) for stream in broken}
    keyed = {}
    for row in rows:
        plain = comparable(row, transcoder)
        if left_out and left_out & _names(plain):
            continue
        keyed["/".join(str(row[c]) for c in key)] = plain
    return keyed


def _select(tx: Any, table: str) -> list[dict[str, Any]]:
    tx.execute(f"SELECT * FROM {table}")  # table names are the read models' own
    return tx.fetchall()


@contextmanager
def one_snapshot(db: Any) -> Iterator[Any]:
    """A read-only transaction of ``db`` whose statements all see one snapshot of it: a read
    model's tracking position and its rows read in it agree, whatever the runner commits
    meanwhile. Read it before the log: the log only grows, so every event up to the position
    is there when the fold reads it, and the fold stops at the position (``vmledger audit
    verify`` here, the console's audit in service/audit/streams.py).

    SQLite: the transaction's first read fixes its snapshot (WAL mode) until it ends.
    PostgreSQL: REPEATABLE READ, as READ COMMITTED would see each statement anew."""
    from projections.db import Dialect

    with db.transaction(commit=False) as tx:
        if tx.dialect is Dialect.POSTGRES:
            tx.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield tx


def _live(db: Any, read_model: Any) -> tuple[int, dict[str, list[dict[str, Any]]]]:
    """The live read model's tracking position and rows, read in one snapshot of the database,
    so that a runner applying batches meanwhile cannot move one apart from the other (a verify
    on a busy service reported rows newer than the position it folded to)."""
    from projections.runner import ProjectionRunner

    with one_snapshot(db) as tx:
        position = ProjectionRunner.position_in(tx, read_model.name)
        return position, {table: _select(tx, table) for table in read_model.tables}
