"""Shared fixtures: every storage test runs on SQLite and on PostgreSQL.

PostgreSQL: the admin URL is ``VMLEDGER_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``). Each test run creates its own database
(a unique name) and drops it at the end; each test starts from an empty schema, or, one
that builds ``services`` on it, from the empty tables ``Services.build`` would create. Where
PostgreSQL cannot be reached the PostgreSQL tests skip with a message, unless
``VMLEDGER_REQUIRE_POSTGRES=1`` (set by ``.ci/run``), which turns the skip into a failure.
"""

from __future__ import annotations

import io
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.container import Services
from service.logs import JsonFormatter
from service.settings import Settings
from tests.api.conformance import conforming

ADMIN_URL = os.environ.get(
    "VMLEDGER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REQUIRE_POSTGRES = os.environ.get("VMLEDGER_REQUIRE_POSTGRES") == "1"


def _with_dbname(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{dbname}"))


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test run, dropped afterwards."""
    dbname = f"vmledger_test_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
    except psycopg.OperationalError as error:
        message = f"PostgreSQL not reachable at {ADMIN_URL}: {error}"
        if REQUIRE_POSTGRES:
            pytest.fail(message + " (VMLEDGER_REQUIRE_POSTGRES=1)")
        pytest.skip(message + " (set VMLEDGER_TEST_POSTGRES_URL to test on PostgreSQL)")
    url = _with_dbname(ADMIN_URL, dbname)
    try:
        yield url
    finally:
        kept = _CONNECTIONS.pop(url, None)
        if kept is not None:
            kept.close()
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


# By database URL: the fixtures' own connection to it, kept for the session. A new one each
# test cost more than the statements it ran (its connect, and its new backend reading the
# catalogue afresh). Its commits do not wait for the disk: the database is dropped at the end.
_CONNECTIONS: dict[str, psycopg.Connection] = {}


def _run(url: str, statement: str) -> None:
    """Run ``statement`` (no parameters; several may be given, separated by semicolons) on
    the fixtures' connection to ``url`` (``_CONNECTIONS``), made again once if a test cut it
    (tests/integration terminate every backend of the database)."""
    for attempt in (1, 2):
        conn = _CONNECTIONS.get(url)
        if conn is None or conn.closed:
            conn = _CONNECTIONS[url] = psycopg.connect(
                url, autocommit=True, options="-c synchronous_commit=off")
        try:
            conn.execute(statement)
            return
        except psycopg.OperationalError:
            del _CONNECTIONS[url]
            conn.close()
            if attempt == 2:
                raise


def _empty_schema(url: str) -> None:
    _run(url, "DROP SCHEMA public CASCADE; CREATE SCHEMA public")


# Every relation of the schema with its columns, every index, constraint, function, type
# and trigger: two schemas with the same fingerprint have the same definitions.
_FINGERPRINT = """
SELECT md5(coalesce(string_agg(item, E'\n' ORDER BY item), '')) FROM (
  SELECT 'relation ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce((
           SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                             || ' ' || a.attnotnull::text || ' '
                             || coalesce(pg_get_expr(d.adbin, d.adrelid), ''),
                             ', ' ORDER BY a.attnum)
           FROM pg_attribute a
           LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
           WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '') AS item
    FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace
  UNION ALL SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = 'public'::regnamespace
  UNION ALL SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace = 'public'::regnamespace
  UNION ALL SELECT 'function ' || p.oid::regprocedure || ' ' || md5(pg_get_functiondef(p.oid))
    FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.prokind IN ('f', 'p')
  UNION ALL SELECT 'type ' || typname || ' ' || typtype::text FROM pg_type
    WHERE typnamespace = 'public'::regnamespace
  UNION ALL SELECT 'trigger ' || pg_get_triggerdef(t.oid) FROM pg_trigger t
    JOIN pg_class c ON c.oid = t.tgrelid
    WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal
) AS items
"""

# By database URL: the fingerprint of the schema ``Services.build`` creates in an empty one.
_BUILT_SCHEMAS: dict[str, str] = {}


def _fingerprint(conn: psycopg.Connection) -> str:
    return conn.execute(_FINGERPRINT).fetchone()[0]


def _built_schema(url: str) -> str:
    if url not in _BUILT_SCHEMAS:
        _empty_schema(url)
        Services.build(Settings(database_url=url, sim_servers=1)).close()
        with psycopg.connect(url) as conn:
            _BUILT_SCHEMAS[url] = _fingerprint(conn)
    return _BUILT_SCHEMAS[url]


# Empties the schema when its fingerprint is the built one's (``{built}``), else drops and
# makes it again: all on the server, in one round trip (a statement a table and a sequence
# each its own round trip took some 30 ms a test). The schema has no foreign keys, so the
# tables empty in any order.
_EMPTY_OR_DROP = """
DO $empty$
DECLARE found_one record;
BEGIN
  IF ({fingerprint}) = '{built}' THEN
    FOR found_one IN SELECT quote_ident(tablename) AS name FROM pg_tables
                WHERE schemaname = 'public' LOOP
      EXECUTE 'DELETE FROM ' || found_one.name;
    END LOOP;
    FOR found_one IN SELECT quote_ident(sequencename) AS name FROM pg_sequences
                WHERE schemaname = 'public' LOOP
      EXECUTE 'ALTER SEQUENCE ' || found_one.name || ' RESTART';
    END LOOP;
  ELSE
    DROP SCHEMA public CASCADE;
    CREATE SCHEMA public;
  END IF;
END
$empty$
"""


def _emptied_for_services(url: str) -> None:
    """Make the database at ``url`` one that ``Services.build`` turns into what it makes of an
    empty one: if its schema is exactly the one build creates (same fingerprint), every row of
    every table is deleted and every sequence restarted, which saves creating some 20 tables
    and their indexes again (about 0.4 s a test); any other schema (a test added, dropped or
    changed something) is dropped and made again, as ``_empty_schema`` does. One statement
    decides and does either (``_EMPTY_OR_DROP``). tests/test_fixtures.py checks that both
    lead to the same database."""
    _run(url, _EMPTY_OR_DROP.format(fingerprint=_FINGERPRINT, built=_built_schema(url)))


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """An empty database on each backend, as a ``VMLEDGER_DATABASE_URL``. For a test that
    builds its ``services`` on it, a PostgreSQL one may hold the empty tables of the schema
    ``Services.build`` creates (``_emptied_for_services``): the same to every such test."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'vmledger.db'}"
    url = request.getfixturevalue("postgres_url")
    if {"services", "tokened_services"} & set(request.fixturenames):
        _emptied_for_services(url)
    else:
        _empty_schema(url)
    return url


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Settings for a test: the test's database, a small simulated fleet, short waits."""
    return Settings(
        database_url=database_url,
        sim_servers=4,
        sim_server_ram_mib=65_536,
        projection_poll_s=0.01,
        worker_poll_s=0.02,
        read_timeout_s=5.0,
    )


@pytest.fixture
def services(settings: Settings) -> Iterator[Services]:
    """The service's objects with no background threads (tests drive them)."""
    built = Services.build(settings)
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def client(services: Services) -> Iterator[TestClient]:
    """An HTTP client of the API over ``services``, with the projection runner and the job
    worker running in the background (embedded mode, on either backend)."""
    app = create_app(services=services, background=True)
    with conforming(TestClient(app)) as http:
        yield http


# The service's default database: a SQLite file in the working directory (README.md), what a
# command run without VMLEDGER_DATABASE_URL opens, and creates.
DEFAULT_DATABASE = Path(Settings.model_fields["database_url"].default.removeprefix("sqlite:///"))


@pytest.fixture(autouse=True)
def no_default_database_written() -> Iterator[None]:
    """Fail a test that leaves the service's default database in the working directory (a
    command run in this process without ``VMLEDGER_DATABASE_URL``: ``database_env``), and
    remove it, so a later test is not blamed and no run leaves one behind. One there before
    the test (an operator's own) is left alone."""
    there = DEFAULT_DATABASE.exists()
    yield
    if there or not DEFAULT_DATABASE.exists():
        return
    for suffix in ("", "-wal", "-shm"):
        Path(f"{DEFAULT_DATABASE}{suffix}").unlink(missing_ok=True)
    pytest.fail(f"the test wrote the default database {DEFAULT_DATABASE.resolve()}: give its "
                "command a database in tmp_path (the database_env fixture)")


@pytest.fixture
def database_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """``VMLEDGER_DATABASE_URL`` set to a SQLite file in ``tmp_path`` for a command this test
    runs in its own process (``CliRunner().invoke(cli, ...)``, which reads its settings from
    the environment); returns the URL. Without it such a command opens the default database
    in the working directory (``no_default_database_written``)."""
    url = f"sqlite:///{tmp_path / 'vmledger.db'}"
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", url)
    return url


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    """Put the root logger back as it was after every test: a test that runs a CLI command
    configures logging (``setup_logging``) with a handler on a stream the test closes, and
    later tests' background threads would log into it; and what its records gather (the
    caller's file and line, which pytest's own log report shows)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    gathered = (logging._srcfile, logging.logThreads, logging.logProcesses,  # type: ignore[attr-defined]
                logging.logMultiprocessing)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        (logging._srcfile, logging.logThreads, logging.logProcesses,  # type: ignore[attr-defined]
         logging.logMultiprocessing) = gathered


@pytest.fixture
def json_logs() -> Iterator[Callable[[], list[dict]]]:
    """What the JSON formatter writes while the test runs (the root logger at INFO, from every
    thread): call it for the lines so far, each parsed (a line that is not one JSON object
    fails the test)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
