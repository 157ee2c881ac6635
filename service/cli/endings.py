"""How a command ends on an error that is the database's, not a bug: one line and a status
(``service.cli.app.main``), never a traceback."""

from __future__ import annotations

from service.access_errors import explain_refusal, refusal
from service.database_failures import database_failure, database_named
from service.schema_check import PrivilegeError, lacks_privilege
from service.settings import Settings


def database_ending(error: BaseException) -> tuple[str, int] | None:
    """The line and exit status that end a command on ``error``, or None for a bug (whose
    traceback is what a developer needs):

    - a read or a write the database role may not make (a worker's role that may only
      ``SELECT``), or a write a database that takes none refused (a standby,
      ``default_transaction_read_only``: ``access_errors``): ``vmledger: ...`` naming the
      role and the privilege or the setting, status 2, as any setting that cannot work;
    - the database unreachable or lost during the command (``database_failure``: a
      refused or cut connection, a pool that handed out none in time, SQLite's file locked
      or unusable): ``vmledger: the database failed (PostgreSQL at HOST:PORT, database NAME):
      ERROR``, status 1, as ``vmledger replay`` and the start-up check say it; the password
      is never shown.

    The settings are read again: the command ran on them, so they are valid."""
    from eventsourcing.persistence import PersistenceError

    if isinstance(error, PersistenceError) and lacks_privilege(error):
        said = str(error).strip().splitlines() or ["permission denied"]  # its first line: no SQL
        role = Settings().postgres_target().user
        return f"vmledger: {PrivilegeError(role, 'a privilege', said[0])}", 2
    refused = refusal(error)
    if isinstance(error, PersistenceError) and refused is not None:  # a database read-only
        return f"vmledger: {explain_refusal(refused, Settings().postgres_target().user)}", 2
    failure = database_failure(error)
    if failure is None:
        return None
    return f"vmledger: the database failed ({database_named(Settings())}): {failure}", 1
