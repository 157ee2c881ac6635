"""Errors that say the database is not what the service built: a table, column or schema it
made at start-up is missing (the database was dropped and made again under a running
process, or a table was dropped by hand). The service makes its tables only at start-up, so
such an error lasts until it is restarted: the API answers it 503 (service/api/errors.py),
the CLI with one line, and neither is a bug in the code (tester B, B11).
"""

from __future__ import annotations

import re
import sqlite3

import psycopg.errors

# psycopg's classes for "no such relation, column or schema" (SQLSTATE 42P01, 42703, 3F000)
_MISSING = (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn,
            psycopg.errors.InvalidSchemaName)
# The same, read from a message: SQLite has no error classes, and eventsourcing wraps the
# driver's error in its own keeping only the message (the cause is chained, when it is).
_MISSING_TEXT = re.compile(r'(no such (table|column)(: [\w.]+)?|relation "[^"]*" does not exist|'
                           r'column "[^"]*" does not exist|schema "[^"]*" does not exist)')


def missing_schema(error: BaseException | None) -> str | None:
    """What is missing (the database's own words, one line), if ``error`` or an error it was
    raised from says a table, column or schema is missing; else None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, (*_MISSING, sqlite3.Error)) or _is_wrapped_driver_error(error):
            found = _MISSING_TEXT.search(str(error))
            if found or isinstance(error, _MISSING):
                return found.group(0) if found else str(error).splitlines()[0]
        error = error.__cause__ or error.__context__
    return None


def _is_wrapped_driver_error(error: BaseException) -> bool:
    from eventsourcing.persistence import PersistenceError
    return isinstance(error, PersistenceError | psycopg.Error)


def explain(missing: str) -> str:
    """The message for a client or an operator: what is wrong and what to do."""
    return (f"the database is not as this service built it ({missing}); it makes its tables "
            "only at start-up: restart it, and the projection runner (`vmledger project` "
            "in production mode) to rebuild a read model whose table went missing "
            "(docs/operations.md)")
