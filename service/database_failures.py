"""Errors that say the database could not be reached, or was lost, rather than a bug: what a
command that ends on one says in one line (``service.cli.app.main``, ``vmledger replay``),
where a traceback would say nothing more to an operator (a tester found two chained ones,
about 75 lines, from ``rebuild`` and ``audit verify``)."""

from __future__ import annotations

import sqlite3

from service.database_url import sqlite_path
from service.redaction import one_line
from service.schema_errors import missing_schema
from service.settings import Settings

# The longest cause a client is shown (``database_cause``): libpq's line for a refused
# connection is about 100 characters, the pool's about 200
CAUSE_LIMIT = 300

# What SQLite says when the file cannot be used, as against our SQL being wrong ("no such
# column", "syntax error"), which sqlite3 raises with the same class.
_SQLITE_UNUSABLE = ("database is locked", "unable to open database file", "disk i/o error",
                    "database or disk is full", "attempt to write a readonly database")


def database_failure(error: BaseException) -> str | None:
    """The database's own words (one line) if ``error`` or an error it was raised from says
    the database could not be reached or was lost, or is not what the service built (a table
    dropped under it: ``missing_schema``); else None. Such errors are psycopg's and the
    event store's ``OperationalError`` and ``InterfaceError`` (a refused or cut connection, a
    pool that handed out none in time, a statement timeout); on SQLite only those whose
    message says the file cannot be used (``_SQLITE_UNUSABLE``). Bad SQL, a stream written
    twice, or any other error is a bug: None."""
    from eventsourcing.persistence import InterfaceError, OperationalError
    from psycopg import InterfaceError as PgInterfaceError
    from psycopg import OperationalError as PgOperationalError

    missing = missing_schema(error)
    if missing is not None:
        return missing
    chain = _chain(error)
    for cause in chain:
        if isinstance(cause, sqlite3.Error):  # the library wraps it keeping its words only
            unusable = any(said in str(cause).lower() for said in _SQLITE_UNUSABLE)
            return _first_line(cause) if unusable else None
    unreachable = (OperationalError, InterfaceError, PgOperationalError, PgInterfaceError)
    for cause in chain:
        if isinstance(cause, unreachable):  # psycopg_pool's PoolTimeout is one too
            return _first_line(cause)
    return None


def database_cause(error: BaseException) -> str:
    """Why the database failed the call that raised ``error``, in one line fit to show a
    client (``/ping``, a 503's message, a change stream's end): the database's or driver's
    own words when the error or one it was raised from has them (``database_failure``: a
    ``FATAL`` line, ``Connection refused``, the pool's timeout with its last connection
    attempt's failure), else the error's own first line, else its class name. Never a
    password nor a URL's credentials (``service.redaction``); at most ``CAUSE_LIMIT``
    characters. (``/ping`` used to say only ``OperationalError``: operator tester.)"""
    return database_failure(error) or _first_line(error)


def database_named(settings: Settings) -> str:
    """The configured database as a line names it, never with its password:
    ``PostgreSQL at HOST:PORT, database NAME`` or ``SQLite file PATH``."""
    if settings.backend == "postgres":
        target = settings.postgres_target()
        return f"PostgreSQL at {target.host}:{target.port}, database {target.dbname}"
    return f"SQLite file {sqlite_path(settings.database_url)}"


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and the errors it was raised from or during, outermost first."""
    chain: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and all(cause is not seen for seen in chain):
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    return chain


def _first_line(error: BaseException) -> str:
    # libpq's messages run over lines ("... unexpectedly" then "\tThis probably means ...")
    return one_line(str(error), CAUSE_LIMIT) or type(error).__name__
