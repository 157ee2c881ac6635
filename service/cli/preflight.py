"""Checks a command makes before it builds the services, so the common first-hour mistakes end
it with one line saying what is wrong and what to do, not a traceback (issue #17): a
PostgreSQL database that does not exist, or a server that cannot be reached."""

from __future__ import annotations

import psycopg

from service.settings import Settings


def check_database(settings: Settings) -> None:
    """Connect once to the configured PostgreSQL database (SQLite needs nothing: its file is
    created). Raises ``SystemExit`` with one line: the database does not exist and the
    ``createdb`` command that creates it, or why the server could not be reached. The
    password is never shown."""
    if settings.backend != "postgres":
        return
    target = settings.postgres_target()
    host, port, user, dbname = target.host, target.port, target.user, target.dbname
    try:
        # the event store's parameters, not libpq's reading of the URL: the check is of the
        # database the command will use
        psycopg.connect(**target.connect_kwargs(), connect_timeout=5).close()
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
