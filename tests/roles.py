"""PostgreSQL roles of a test's own: uniquely named (roles are the whole cluster's, shared by
every test database), dropped afterwards with whatever they own or were granted."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg


@contextmanager
def a_role(database_url: str, kind: str, options: str = "LOGIN") -> Iterator[str]:
    """A role ``vmledger_test_KIND_XXXXXXXX`` made with ``options`` by ``database_url``'s
    (superuser) role, with USAGE on schema public; its name. Afterwards what it owns in that
    database is dropped, its grants revoked, and the role dropped."""
    role = f"vmledger_test_{kind}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} {options}")
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
    try:
        yield role
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def as_role(database_url: str, role: str) -> str:
    """``database_url`` with ``role`` as its user (trust authentication: no password)."""
    parts = urlsplit(database_url)
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port or 5432}"))


def run_sql(database_url: str, *statements: str) -> None:
    """Run ``statements`` as ``database_url``'s role, each committed."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def table_acl(database_url: str, table: str) -> set[tuple[str, str, str, bool, str | None]]:
    """``table``'s grants, its own and its columns', as ``(grantor, grantee, privilege,
    grantable, column)`` (grantee ``PUBLIC`` for 0; column None for the table's)."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT pg_get_userbyid(a.grantor), CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE "
            "pg_get_userbyid(a.grantee) END, a.privilege_type, a.is_grantable, NULL "
            "FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a "
            "WHERE c.oid = to_regclass(%s) "
            "UNION ALL SELECT pg_get_userbyid(a.grantor), CASE WHEN a.grantee = 0 THEN "
            "'PUBLIC' ELSE pg_get_userbyid(a.grantee) END, a.privilege_type, a.is_grantable, "
            "t.attname FROM pg_attribute t CROSS JOIN LATERAL aclexplode(t.attacl) a "
            "WHERE t.attrelid = to_regclass(%s)", (table, table)).fetchall()
    return set(rows)


def owner_of(database_url: str, table: str) -> str:
    """The name of ``table``'s owner."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT pg_get_userbyid(relowner) FROM pg_class "
                           "WHERE oid = to_regclass(%s)", (table,)).fetchone()
    assert row is not None, f"no table {table}"
    return row[0]
