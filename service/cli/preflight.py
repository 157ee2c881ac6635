"""Checks a command makes before it builds the services, so the common first-hour mistakes end
it with one line saying what is wrong and what to do, not a traceback (issue #17): a
PostgreSQL database that does not exist, or a server that cannot be reached."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg

from service.settings import Settings

if TYPE_CHECKING:
    from service.container import Services


def checked_services(settings: Settings | None = None, *, register_fleet: bool = True
                     ) -> Services:
    """The services of ``settings`` (default: read from the environment), built only after
    ``check_database`` passed: every command that opens the database builds them here, so that
    none meets a missing database with the pool's traceback (``changes`` once did). Raises
    ``SystemExit`` as ``check_database`` does, and pydantic's ``ValidationError`` for bad
    settings (``service.cli.app.main`` reports it). ``register_fleet`` as ``Services.build``
    takes it: False for a command that must append nothing."""
    from service.container import Services

    settings = settings if settings is not None else Settings()
    check_database(settings)
    return Services.build(settings, register_fleet=register_fleet)


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
