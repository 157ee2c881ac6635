"""Whether the tables the service would use are its own: a table of one of its names that
another program made (a foreign ``stored_events``, ``vmledger_events`` or ``vm_view``) is kept
as it is by ``CREATE TABLE IF NOT EXISTS``, and every command then ended in a traceback at its
first statement on it ("no such column: owner_uuid", 'column "notification_id" does not
exist'; ``serve``: "Application startup failed", status 3). ``check_tables`` finds such a
table before any command uses the database (``service.cli.preflight``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from eventsourcing.persistence import InfrastructureFactory, JSONTranscoder
from eventsourcing.utils import Environment

from projections.db import Database, Dialect, declared_columns
from projections.tracking import TRACKING_DDL, applied_read_models
from service.commands import idempotency
from service.settings import Settings

# The columns eventsourcing 9.5's recorders read and write (their CREATE TABLE statements):
# the events' and the snapshots' tables; on PostgreSQL the events also carry the position.
_RECORDER_COLUMNS = ("originator_id", "originator_version", "topic", "state")
_POSTGRES_EVENT_COLUMNS = (*_RECORDER_COLUMNS, "notification_id")



class ForeignTableError(Exception):
    """A table the service needs exists without columns the service's statements use:
    another program made it. ``table`` is its name, ``missing`` the columns it lacks."""

    def __init__(self, table: str, missing: Sequence[str]):
        self.table = table
        self.missing = list(missing)
        super().__init__(
            f"the database holds a table {table} of another schema (it has no column "
            f"{', '.join(self.missing)}): another program's, or another version's; name an "
            "empty database, or one this vmledger made")


def check_tables(settings: Settings) -> None:
    """Raise ``ForeignTableError`` for the first table of the service's (the event store's,
    the read models', the idempotency keys') that exists without a column the service
    needs. Creates nothing; a missing table is fine (it is made at start-up), and so is a
    read model's table that lacks a column where the read model has applied events (an older
    version's: the projection runner rebuilds it when it starts). Reads the catalogue over
    one connection of the library's own infrastructure for ``settings``, which names the
    event store's tables as the service's app does, without building an app and its pool."""
    from service.container import read_models  # the composition root imports this module's users
    from service.commands.application import VmLedger

    env = Environment(VmLedger.name, {**settings.eventsourcing_env(), "CREATE_TABLE": "n",
                                      "POSTGRES_POOL_SIZE": "1", "POSTGRES_MAX_OVERFLOW": "0"})
    factory = InfrastructureFactory.construct(env)
    try:
        db = Database(factory.datastore)  # type: ignore[attr-defined] - both backends have one
        events = (_POSTGRES_EVENT_COLUMNS if db.dialect is Dialect.POSTGRES
                  else _RECORDER_COLUMNS)
        recorder, snapshots = (factory.application_recorder(),
                               factory.aggregate_recorder("snapshots"))
        needed = {recorder.events_table_name: events,  # type: ignore[attr-defined]
                  snapshots.events_table_name: _RECORDER_COLUMNS}  # type: ignore[attr-defined]
        # (not the simulated fleet's: it adds the columns an older table lacks)
        needed.update(_declared([TRACKING_DDL, idempotency.DDL]))
        with db.transaction(commit=False) as tx:
            # A read model that has applied events is ours, its tables made by this or an
            # older version: the runner makes a stale one again (mend_stale_tables)
            applied = applied_read_models(db, tx)
            # no event is folded here: any transcoder will do
            for model in read_models(JSONTranscoder()):
                if model.name not in applied:
                    needed.update(model.declared_columns(db))
            present = db.columns_of(tx, needed)
        for table, columns in needed.items():
            missing = [column for column in columns if column not in present[table]]
            if present[table] and missing:
                raise ForeignTableError(table, missing)
    finally:
        factory.close()


def _declared(statements: Iterable[str]) -> Mapping[str, Sequence[str]]:
    tables = (declared_columns(statement) for statement in statements)
    return dict(table for table in tables if table is not None)
