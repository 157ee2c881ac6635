"""A table made to replace another keeps the replaced table's privileges (PostgreSQL).

A rebuild's switch (``projections.rebuild``), a stale read model's table made again
(``ProjectionRunner.mend_stale_tables``) and the simulated fleet's ``sim_fences`` keyed anew
(``service.jobs.compute.fences``) drop a table and put a new one in its place. PostgreSQL's
grants belong to the table, not to its name: the new table had only its creator's, and
every other role lost its own (operator tester: after ``vmledger rebuild job_view`` as the
owner, ``GET /jobs`` as the app's role answered 500 and a ``work`` process as that role
logged "permission denied for table vm_view"). So before the old table goes, its
privileges are read (``privileges_of``), and once the new one is in place, in the same
transaction, given to it (``keep``):

- every grant of the table's ACL (``pg_class.relacl``), to each grantee (``PUBLIC``
  included), with its grant option, and every column's (``pg_attribute.attacl``) on the
  columns the new table has;
- its owner, where the new table's differs (a rebuild run by a member of the owning role,
  or by a superuser): ``ALTER TABLE ... OWNER TO``, which moves its indexes with it (the
  read models have no sequence). Left as it is, with a warning, where the role running it
  may not give the table to that owner.

The grants are made by the role that runs the statement, as the owner: the ACL names the
owner as their grantor where the old one named a role that held a grant option. Grants the
new table already has (the schema's default privileges) are kept too. SQLite has no
grants: nothing is read or done there.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from projections.db import Dialect, Tx

log = logging.getLogger(f"vmledger.{__name__}")

# One row per grant of the table (``column`` null) and of each of its columns; a table whose
# ACL is the default (null) gives one row of nulls, for its owner. Role and column names come
# quoted as a statement names them (``regrole``'s text, ``quote_ident``); grantee 0 is PUBLIC.
_READ = """
SELECT c.relowner::regrole::text AS owner, pg_get_userbyid(c.relowner) AS owner_name,
       g.column_name, g.privilege_type, g.is_grantable,
       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END AS grantee
FROM pg_class AS c
LEFT JOIN LATERAL (
    SELECT NULL::text AS column_name, a.grantee, a.privilege_type, a.is_grantable
    FROM aclexplode(c.relacl) AS a
    UNION ALL
    SELECT quote_ident(t.attname), a.grantee, a.privilege_type, a.is_grantable
    FROM pg_attribute AS t CROSS JOIN LATERAL aclexplode(t.attacl) AS a
    WHERE t.attrelid = c.oid AND t.attnum > 0 AND NOT t.attisdropped
) AS g ON true
WHERE c.oid = to_regclass(?)
"""


@dataclass(frozen=True)
class Privileges:
    """A table's owner and grants as ``privileges_of`` read them: ``owner`` quoted as a
    statement names it, ``owner_name`` as the catalogue does; ``grants`` as
    ``(grantee, privilege, grantable, column)``, the grantee quoted or ``PUBLIC`` and the
    column quoted, or None for the table's own."""

    table: str
    owner: str
    owner_name: str
    grants: tuple[tuple[str, str, bool, str | None], ...]


def privileges_of(tx: Tx, table: str) -> Privileges | None:
    """The owner and grants of ``table`` (one of the service's own names, never input), read
    in ``tx``; None on SQLite and where there is no such table."""
    if tx.dialect is not Dialect.POSTGRES:
        return None
    tx.execute(_READ, (table,))
    rows = tx.fetchall()
    if not rows:
        return None
    grants = tuple((row["grantee"], row["privilege_type"], bool(row["is_grantable"]),
                    row["column_name"]) for row in rows if row["privilege_type"] is not None)
    return Privileges(table, rows[0]["owner"], rows[0]["owner_name"], grants)


def keep(tx: Tx, table: str, privileges: Privileges | None) -> None:
    """Give ``table`` (just made, in ``tx``, to replace the one ``privileges`` were read of)
    that table's owner and grants (this module's docstring says which); nothing for None."""
    if privileges is None:
        return
    _keep_owner(tx, table, privileges)
    tx.execute("SELECT quote_ident(attname) AS name FROM pg_attribute WHERE attrelid = "
               "to_regclass(?) AND attnum > 0 AND NOT attisdropped", (table,))
    columns = {row["name"] for row in tx.fetchall()}
    # one GRANT per grantee, grant option and column: "GRANT SELECT, UPDATE ON t TO r"
    granted: dict[tuple[str, bool, str | None], list[str]] = defaultdict(list)
    for grantee, privilege, grantable, column in privileges.grants:
        if column is None or column in columns:  # a column the new table lacks has no grant
            granted[grantee, grantable, column].append(
                privilege if column is None else f"{privilege} ({column})")
    tx.execute_all(f"GRANT {', '.join(each)} ON {table} TO {grantee}"
                   f"{' WITH GRANT OPTION' if grantable else ''}"
                   for (grantee, grantable, _column), each in granted.items())


def carry(tx: Tx, old: str, new: str) -> None:
    """Give table ``new`` the owner and grants of table ``old``, both there, in ``tx``."""
    keep(tx, new, privileges_of(tx, old))


def _keep_owner(tx: Tx, table: str, privileges: Privileges) -> None:
    """Make ``privileges``' owner ``table``'s, where it is another and the role running the
    statement may (it may become that role, which may create in the schema); else warn."""
    tx.execute("SELECT pg_get_userbyid(relowner) AS owner, pg_has_role(?, 'MEMBER') AND "
               "has_schema_privilege(?, relnamespace, 'CREATE') AS may FROM pg_class "
               "WHERE oid = to_regclass(?)",
               (privileges.owner_name, privileges.owner_name, table))
    row = tx.fetchone()
    if row is None or row["owner"] == privileges.owner_name:
        return
    if not row["may"]:
        log.warning("table %s, made to replace one owned by %s, is owned by %s, which may not "
                    "give it to %s: give it to %s, as the table it replaced was", table,
                    privileges.owner_name, row["owner"], privileges.owner_name,
                    privileges.owner_name)
        return
    tx.execute_all([f"ALTER TABLE {table} OWNER TO {privileges.owner}"])


# The tables of ``tables`` that exist and the connection's role may not read. CASE keeps
# has_table_privilege from a table that is not there (it raises on an unknown name): a
# missing table is the schema check's to name.
_UNREADABLE = ("SELECT name FROM unnest(CAST(? AS TEXT[])) AS name WHERE CASE WHEN "
               "to_regclass(name) IS NULL THEN false ELSE NOT has_table_privilege(name, "
               "'SELECT') END ORDER BY name")


def unreadable_in(tx: Tx, tables: Sequence[str]) -> Callable[[], list[str]]:
    """Send the query of which of ``tables`` (the service's own names) the role may not
    SELECT, in ``tx``; the answer (sorted) is read by calling what it returns, after
    ``tx``'s block, as ``tracking.positions_in``'s, so a pipelined transaction asks both in
    one round trip (``/ping``'s probe: a read model the role may not read answers every read
    503, so the ping does too). None of them on SQLite, which has no roles."""
    if tx.dialect is not Dialect.POSTGRES:
        return list
    answer = tx.submit(_UNREADABLE, (list(tables),))
    return lambda: [row["name"] for row in answer()]
