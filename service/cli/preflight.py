"""Checks a command makes before it builds the services, so the common first-hour mistakes end
it with one line saying what is wrong and what to do, not a traceback (issue #17): a
PostgreSQL database that does not exist, or a server that cannot be reached; a SQLite file
that cannot be opened or is not a database; a table of the service's that another program
made."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from service.database_url import sqlite_path
from service.schema_check import (
    ForeignTableError,
    PrivilegeError,
    ReadOnlyDatabaseError,
    check_tables,
)
from service.settings import Settings

if TYPE_CHECKING:
    from service.container import Services


def checked_services(settings: Settings | None = None, *, register_fleet: bool = True,
                     writes: bool = True) -> Services:
    """The services of ``settings`` (default: read from the environment), built only after
    ``check_database`` passed: every command that opens the database builds them here, so that
    none meets a missing database with the pool's traceback (``changes`` once did). Raises
    ``SystemExit`` as ``check_database`` does, and pydantic's ``ValidationError`` for bad
    settings (``service.cli.app.main`` reports it). ``register_fleet`` as ``Services.build``
    takes it: False for a command that must append nothing. ``writes``: False for a command
    that only reads (``audit verify``, ``history``, ``changes``), which needs no more than
    SELECT on tables another role made."""
    from service.container import Services

    settings = settings if settings is not None else Settings()
    check_database(settings, writes=writes)
    # a command that only reads runs no DDL over tables that are there and current: even
    # a CREATE INDEX IF NOT EXISTS waits for every open append (``Services.build``)
    return Services.build(settings, register_fleet=register_fleet, reads_only=not writes)


def check_database(settings: Settings, *, writes: bool = True) -> None:
    """Connect once to the configured PostgreSQL database, or open the SQLite file (created
    when missing, as the command would create it, for a command that ``writes``; a command
    that only reads refuses a missing file, as PostgreSQL refuses a missing database: a
    mistyped path made an empty database that ``audit verify`` said held). Raises ``SystemExit`` with one line: the
    database does not exist and the ``createdb`` command that creates it, or why the server
    could not be reached; for SQLite, a line naming ``VMLEDGER_DATABASE_URL`` (status 2, as
    any bad setting) when the file cannot be opened or is not a database. Then, on either,
    a line naming ``VMLEDGER_DATABASE_URL`` (status 2) when a table of the service's exists
    with another schema (``service.schema_check``), and on PostgreSQL one naming the role
    (status 2) when a table is missing and the role may not create it, or may not read one,
    or, for a command that ``writes``, may not write one or the database takes no writes.
    The password is never shown."""
    if settings.backend == "postgres":
        _check_postgres(settings)
    else:
        _check_sqlite(settings.database_url, creates=writes)
    try:
        check_tables(settings, writes=writes)
    except ForeignTableError as foreign:
        print(f"VMLEDGER_DATABASE_URL: {foreign}", file=sys.stderr)
        raise SystemExit(2) from None
    except (PrivilegeError, ReadOnlyDatabaseError) as refused:
        print(f"vmledger: {refused}", file=sys.stderr)
        raise SystemExit(2) from None


def _check_postgres(settings: Settings) -> None:
    target = settings.postgres_target()
    host, port, user, dbname = target.host, target.port, target.user, target.dbname
    try:
        # the event store's parameters, not libpq's reading of the URL: the check is of the
        # database the command will use
        psycopg.connect(**target.connect_kwargs(),
                        connect_timeout=settings.postgres_connect_timeout_s).close()
    except psycopg.OperationalError as error:
        reason = _reason(str(error))
        if f'database "{dbname}" does not exist' in reason:
            raise SystemExit(
                f'vmledger: database "{dbname}" does not exist on {host}:{port}; create it '
                f"with: createdb -h {host} -p {port} -U {user} {dbname}") from None
        raise SystemExit(f"vmledger: cannot connect to PostgreSQL at {host}:{port} as "
                         f"{user}: {reason}") from None


def _reason(message: str) -> str:
    """The server's own words from a libpq error (after ``FATAL:`` or ``failed:``), on one
    line."""
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    for marker in ("FATAL:", "failed:"):
        if marker in first:
            first = first.rsplit(marker, 1)[1]
    return " ".join(first.split())


def _check_sqlite(url: str, *, creates: bool = True) -> None:
    """Open the SQLite file ``url`` names once. Settings already refuse a file in a directory
    that does not exist; a path that is itself a directory, or one SQLite may not create
    (``/proc``), got past them and ended the command, or serve's start-up, in a traceback
    ("unable to open database file"). Unless the command ``creates`` it, a file that does not
    exist is refused before anything opens it (opening creates it)."""
    path = sqlite_path(url)
    if not creates and not Path(path).exists():
        print(f"VMLEDGER_DATABASE_URL: {path} does not exist: a command that only reads "
              "needs an existing SQLite database (check the path)", file=sys.stderr)
        raise SystemExit(2)
    problem = "it is a directory" if Path(path).is_dir() else None
    if problem is None:
        try:
            # connect() reads nothing; the first statement reads the header ("file is not a
            # database")
            with contextlib.closing(sqlite3.connect(path)) as connection:
                connection.execute("PRAGMA schema_version")
        except sqlite3.Error as error:
            problem = str(error)
    if problem is not None:
        print(f"VMLEDGER_DATABASE_URL: SQLite cannot open {path} ({problem}): name a SQLite "
              "database, or a file SQLite may create", file=sys.stderr)
        raise SystemExit(2)
