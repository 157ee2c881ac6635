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

from projections.db import Database, Dialect, Tx, declared_columns
from projections.read_model import ReadModel
from projections.tracking import TRACKING_DDL, applied_read_models
from service import schema_undone
from service.access_errors import PRIVILEGE, READ_ONLY, Refusal, explain_refusal, refusal
from service.commands import idempotency
from service.jobs.compute.fences import PER_VM_LACKS
from service.jobs.compute.simulated import ADDED_COLUMNS as FLEET_ADDED_COLUMNS
from service.jobs.compute.simulated import DDL as FLEET_DDL
from service.service_read_models import read_models
from service.settings import Settings

# The columns eventsourcing 9.5's recorders read and write (their CREATE TABLE statements):
# the events' and the snapshots' tables; on PostgreSQL the events also carry the position.
_RECORDER_COLUMNS = ("originator_id", "originator_version", "topic", "state")
_POSTGRES_EVENT_COLUMNS = (*_RECORDER_COLUMNS, "notification_id")



class PrivilegeError(Exception):
    """The database role lacks a privilege a command needs. ``role`` is the role's name,
    ``privilege`` the privilege it lacks (``CREATE on schema public``), ``why`` what needed
    it. The privileges each process needs: docs/operations.md, "Database privileges"."""

    def __init__(self, role: str, privilege: str, why: str):
        self.role, self.privilege = role, privilege
        super().__init__(f'PostgreSQL role "{role}" lacks {privilege} ({why}): grant it, or '
                         "run the command as a role that has it (docs/operations.md, "
                         '"Database privileges")')


class ReadOnlyDatabaseError(Exception):
    """The database takes no writes from the role (a standby, ``default_transaction_read_only``
    on for the role or the database), and the command writes (``access_errors``)."""

    def __init__(self, role: str, said: str):
        self.role = role
        super().__init__(explain_refusal(Refusal(READ_ONLY, said), role))


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


def check_tables(settings: Settings, *, writes: bool = True) -> None:
    """Raise ``ForeignTableError`` for the first table of the service's (the event store's,
    the read models', the idempotency keys', the simulated fleet's) that exists without a
    column the service needs. Creates nothing; a missing table is fine (it is made at
    start-up), and so is a read model's table that lacks a column where the read model has
    applied events (an older version's: the projection runner rebuilds it when it starts),
    and a fleet table that lacks only columns the fleet adds to an older one
    (``simulated.ADDED_COLUMNS``), or an older per-VM ``sim_fences`` (``fences.PER_VM_LACKS``,
    keyed per server at start-up). On PostgreSQL, raise
    ``PrivilegeError`` when a table is missing and the role may not create it (no CREATE on
    the schema: PostgreSQL 15's default for an ordinary role), when the role may not read
    the rows of one that exists, or, for a command that ``writes``, write them; and when
    the role may not run start-up's DDL over tables that DDL would change
    (``refuse_undone``); ``ReadOnlyDatabaseError`` when a command that ``writes`` meets a
    database that takes no writes (a standby). Reads the catalogue over one connection of
    the library's own infrastructure for ``settings``, which names the event store's tables
    as the service's app does, without building an app and its pool."""
    from service.commands.application import VmLedger

    env = Environment(VmLedger.name, {**settings.eventsourcing_env(), "CREATE_TABLE": "n",
                                      "POSTGRES_POOL_SIZE": "1", "POSTGRES_MAX_OVERFLOW": "0"})
    factory = InfrastructureFactory.construct(env)
    try:
        db = Database(factory.datastore)  # type: ignore[attr-defined] - both backends have one
        recorder, snapshots = (factory.application_recorder(),
                               factory.aggregate_recorder("snapshots"))
        tables = service_tables(db, recorder.events_table_name,  # type: ignore[attr-defined]
                                snapshots.events_table_name)  # type: ignore[attr-defined]
        with db.transaction(commit=False) as tx:
            # A read model that has applied events is ours, its tables made by this or an
            # older version: the runner makes a stale one again (mend_stale_tables)
            applied = applied_read_models(db, tx)
            present = db.columns_of(tx, tables)
            missing = [table for table in tables if not present[table]]
            refuse_missing(db, tx, missing)
            if writes:
                _refuse_read_only(db, tx)
            if not missing:
                refuse_undone(db, tx)
            _refuse_unusable(db, tx, [table for table in tables if present[table]],
                             writes=writes)
        needed = dict(tables)
        # the simulated fleet adds the columns an older table of its own lacks, and keys an
        # older per-VM sim_fences per server
        for table, column in (*[added[:2] for added in FLEET_ADDED_COLUMNS], PER_VM_LACKS):
            needed[table] = [each for each in needed[table] if each != column]
        for model in _read_models():
            if model.name in applied:
                for table in model.declared_columns(db):
                    del needed[table]
        for table, columns in needed.items():
            missing = [column for column in columns if column not in present[table]]
            if present[table] and missing:
                raise ForeignTableError(table, missing)
    finally:
        factory.close()


def service_tables(db: Database, events_table: str, snapshots_table: str
                   ) -> dict[str, Sequence[str]]:
    """Every table the service makes, by name, with the columns its statements use: the
    event store's (``events_table`` and ``snapshots_table``, the names the library gives
    them), the tracking table, the idempotency keys', every read model's and the simulated
    fleet's."""
    events = (_POSTGRES_EVENT_COLUMNS if db.dialect is Dialect.POSTGRES
              else _RECORDER_COLUMNS)
    tables: dict[str, Sequence[str]] = {events_table: events,
                                        snapshots_table: _RECORDER_COLUMNS}
    tables.update(_declared([TRACKING_DDL, idempotency.DDL]))
    for model in _read_models():
        tables.update(model.declared_columns(db))
    tables.update(_fleet_tables())
    return tables


def refuse_missing(db: Database, tx: Tx, missing: Sequence[str]) -> None:
    """Raise ``PrivilegeError`` when tables of the service's are ``missing`` and the role
    may not create them (PostgreSQL: no CREATE on the schema it would make them in). SQLite
    has no roles: its file's permissions are ``_check_sqlite``'s."""
    if not missing or db.dialect is not Dialect.POSTGRES:
        return
    tx.execute("SELECT current_user AS role, current_schema() AS schema, "
               "coalesce(has_schema_privilege(current_schema(), 'CREATE'), false) AS may")
    row = tx.fetchone()
    if row is not None and not row["may"]:
        raise PrivilegeError(row["role"], f"CREATE on schema {row['schema']}",
                             f"{_some(missing)} missing, which it would make")


def refuse_undone(db: Database, tx: Tx) -> bool:
    """On PostgreSQL, where the role may not run start-up's DDL (``schema_undone.may_run_ddl``)
    over tables that all exist: raise ``PrivilegeError`` when that DDL would change
    something (``schema_undone.undone``: a database an older version made), saying to run
    the command once as the tables' owner. Returns whether start-up's DDL is skipped (False
    where the role may run it, and on SQLite)."""
    if db.dialect is not Dialect.POSTGRES or schema_undone.may_run_ddl(tx):
        return False
    found = schema_undone.undone(db, tx, _read_models())
    if found:
        tx.execute("SELECT current_user AS role")
        row = tx.fetchone()
        raise PrivilegeError(row["role"] if row else "?", "ownership of the tables",
                             f"{_some(found)} missing or stale, which start-up would make "
                             "or change: run the command once as the tables' owner")
    return True


def _refuse_unusable(db: Database, tx: Tx, tables: Sequence[str], *, writes: bool) -> None:
    """Raise ``PrivilegeError`` when the role lacks SELECT on one of ``tables`` (which are
    there), or, for a command that ``writes``, INSERT, UPDATE or DELETE (PostgreSQL): a
    process would meet it at its first read or write, in ``serve``'s start-up as
    "Application startup failed". Such a table is named as lacking the privilege, never as
    missing (``Database.columns_of`` sees it; operator tester: an auditor's role without
    SELECT was told the tables were missing and that it lacked CREATE)."""
    if not tables or db.dialect is not Dialect.POSTGRES:
        return
    wanted = _ORDER if writes else _ORDER[:1]
    names, privileges = (", ".join("?" * len(each)) for each in (tables, wanted))
    tx.execute("SELECT current_user AS role, t.name, p.privilege FROM unnest(ARRAY["
               f"{names}]::text[]) AS t(name) CROSS JOIN unnest(ARRAY[{privileges}]::text[]) "
               "AS p(privilege) WHERE NOT has_table_privilege(quote_ident(t.name), "
               "p.privilege) ORDER BY t.name", [*tables, *wanted])
    rows = tx.fetchall()
    if rows:
        lacked = sorted({row["privilege"] for row in rows}, key=_ORDER.index)
        refused = list(dict.fromkeys(row["name"] for row in rows))
        raise PrivilegeError(rows[0]["role"], f"{', '.join(lacked)} on {_some(refused)}",
                             "this command writes the service's tables" if writes
                             else "this command reads the service's tables")


_ORDER = ["SELECT", "INSERT", "UPDATE", "DELETE"]


def _refuse_read_only(db: Database, tx: Tx) -> None:
    """Raise ``ReadOnlyDatabaseError`` when the database takes no writes from the role
    (PostgreSQL: a standby, or ``default_transaction_read_only`` on): a process that writes
    met it at start-up's first statement, in a traceback (``serve``: "Application startup
    failed")."""
    if db.dialect is not Dialect.POSTGRES:
        return
    tx.execute("SELECT current_user AS role, pg_is_in_recovery() AS standby, "
               "current_setting('transaction_read_only') = 'on' AS read_only")
    row = tx.fetchone()
    if row is not None and (row["standby"] or row["read_only"]):
        raise ReadOnlyDatabaseError(row["role"], "a standby, in recovery" if row["standby"]
                                    else "transaction_read_only is on")


def lacks_privilege(error: BaseException) -> bool:
    """Whether ``error`` (the library's or psycopg's) is, or was raised from, PostgreSQL's
    refusal for want of a privilege (SQLSTATE 42501: "permission denied for ...", "must be
    owner of ...")."""
    refused = refusal(error)
    return refused is not None and refused.sqlstate == PRIVILEGE


def _some(names: Sequence[str], shown: int = 3) -> str:
    """``names`` on one line: the first ``shown``, then how many more."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"{', '.join(names[:shown])}{more}"


def _read_models() -> list[ReadModel]:
    return read_models(JSONTranscoder())  # no event is folded: any transcoder will do


def _fleet_tables() -> Mapping[str, Sequence[str]]:
    return _declared(FLEET_DDL)


def _declared(statements: Iterable[str]) -> Mapping[str, Sequence[str]]:
    tables = (declared_columns(statement) for statement in statements)
    return dict(table for table in tables if table is not None)
