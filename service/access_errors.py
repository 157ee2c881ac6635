"""Errors that say the database refuses the service's role what it asks, because of how the
database was set up rather than a bug in the code: a privilege the role lacks (SQLSTATE
42501: "permission denied for table job_view", "must be owner of table vm_view"), or a
database that takes no writes (25006, "cannot execute INSERT in a read-only transaction": a
hot standby, or ``default_transaction_read_only`` set for the role or the database). Such an
error lasts until an operator changes the database: the API answers it 503 naming the
problem (service/api/errors.py), the processes' loops log it as one line
(``service.logs.Throttled``), and a command ends with one line, status 2
(``service.cli.endings``), never a traceback. Operator tester: a rebuild left the app's role
without SELECT on ``job_view``, and ``GET /jobs`` answered a plain-text 500 with two ERROR
tracebacks.

The service itself writes only in transactions it opens for writing: its read-only ones
(``projections.db``, ``commit=False``) only read, so a 25006 is the database's setting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PRIVILEGE = "42501"  # insufficient_privilege
READ_ONLY = "25006"  # read_only_sql_transaction

_DENIED = re.compile(r"permission denied for (?P<what>.+)")
_OWNER = re.compile(r"must be owner of (?P<what>.+)")


@dataclass(frozen=True)
class Refusal:
    """The database's refusal: its SQLSTATE (``PRIVILEGE`` or ``READ_ONLY``) and its own
    words (the first line of its message)."""

    sqlstate: str
    said: str


def refusal(error: BaseException | None) -> Refusal | None:
    """The refusal ``error``, or an error it was raised from or during, is (psycopg's error,
    which the event store's own wraps keeping only its words); None for any other error."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        sqlstate = getattr(error, "sqlstate", None)
        if sqlstate in (PRIVILEGE, READ_ONLY):
            said = str(error).strip().splitlines()
            return Refusal(sqlstate, said[0] if said else "permission denied")
        error = error.__cause__ or error.__context__
    return None


def explain_refusal(refused: Refusal, role: str | None) -> str:
    """The message for a client or an operator: what the database refused ``role`` (its
    name; None: the service's role, unnamed), in its own words, and what to do."""
    who = f'role "{role}"' if role else "the service's role"
    if refused.sqlstate == READ_ONLY:
        return (f"the database takes no writes for {who} ({refused.said}): it is a "
                "standby, or default_transaction_read_only is on for the role or the "
                "database; point VMLEDGER_DATABASE_URL at the primary, or turn the setting "
                'off (docs/operations.md, "Database privileges")')
    denied, owner = _DENIED.match(refused.said), _OWNER.match(refused.said)
    what = (f"access to {denied['what']}" if denied
            else f"ownership of {owner['what']}" if owner else f"access ({refused.said})")
    return (f"the database refused {what} for {who}: grant the role the privileges "
            'docs/operations.md ("Database privileges") lists for this process')


class ReadRefused(Exception):
    """Reads the database would refuse the service's role, found before any is made
    (``/ping``'s probe asks which read model tables the role may read): a ``PRIVILEGE``
    refusal in the database's own words, so that it is explained and answered as one the
    database raised (``refusal``)."""

    sqlstate = PRIVILEGE

    def __init__(self, tables: list[str]):
        super().__init__(f"permission denied for table {', '.join(tables)}")
        self.tables = tables
