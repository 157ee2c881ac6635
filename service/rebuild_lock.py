"""One ``vmledger rebuild`` at a time on a database (docs/operations.md, "Processes").

Two rebuilds at once share the shadow tables (``<table>__rebuild``): the second one's
preparation drops what the first is building, so one ended with ``relation
"vm_view__rebuild" does not exist`` and the other applied every event twice. Each rebuild
therefore holds a lock for its whole run, one that ends with its process, however it ends:
on PostgreSQL a session-level advisory lock on a connection of its own; on SQLite an
exclusive ``flock`` on the file ``<database file>.rebuild-lock`` beside the database (its
write lock cannot be held that long: the service writes all along). The live service takes
neither, so it keeps serving and projecting.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator

import psycopg

from service.database_url import sqlite_path
from service.settings import Settings

# The advisory lock's key: any bigint no other lock of the database uses ("vmldgrRB").
ADVISORY_KEY = 0x766D6C6467725242


class RebuildRunningError(Exception):
    """Another rebuild holds the lock on this database."""


@contextlib.contextmanager
def one_rebuild_at_a_time(settings: Settings) -> Iterator[None]:
    """Hold the database's rebuild lock while the block runs. Raises
    ``RebuildRunningError`` at once, without waiting, when another process holds it."""
    if settings.backend == "postgres":
        target = settings.postgres_target().connect_kwargs()
        with psycopg.connect(**target, autocommit=True,
                             connect_timeout=settings.postgres_connect_timeout_s) as connection:
            [taken] = connection.execute("SELECT pg_try_advisory_lock(%s)",
                                         (ADVISORY_KEY,)).fetchone() or [False]
            if not taken:
                raise RebuildRunningError(
                    "another rebuild is running on this database (it holds PostgreSQL's "
                    f"advisory lock {ADVISORY_KEY})")
            yield  # the lock ends with the session, as the block ends or the process dies
        return
    with open(f"{sqlite_path(settings.database_url)}.rebuild-lock", "a") as lock_file:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RebuildRunningError(
                f"another rebuild is running on this database (it holds {lock_file.name})"
            ) from None
        yield  # the lock ends with the file's descriptor
