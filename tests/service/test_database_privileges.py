"""A PostgreSQL role that may not create tables (since PostgreSQL 15 an ordinary role has no
CREATE on schema public; an auditor's role may only SELECT): the commands that only read work
on tables another role made, and a privilege missing ends a command with one line naming the
role and the privilege, status 2, never a traceback (tester: every command, ``audit verify``
and ``history`` included, ended in ``ProgrammingError: permission denied for schema public``;
``serve`` in "Application startup failed", status 3). PostgreSQL only: SQLite has no roles.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import psycopg
import pytest

from projections.db import Database
from service.container import Services, open_ledger
from service.settings import Settings
from tests.cli import vmledger
from tests.roles import a_role, as_role, run_sql

# real CLI processes on edge-case databases (.ci/slow.sh), left out of the default run
pytestmark = [pytest.mark.parametrize("database_url", ["postgres"], indirect=True),
              pytest.mark.slow]


@pytest.fixture
def reader(database_url: str) -> Iterator[str]:
    """A login role of its own (``tests.roles``, dropped afterwards) with USAGE but no
    CREATE on schema public (PostgreSQL 15's default for ordinary roles, revoked here for
    older servers), and SELECT on every table there is when the test asks
    (``_grant_select``); the URL of ``database_url`` as that role."""
    with a_role(database_url, "reader") as role:
        # the fixture's schema public is made again, without the default grants
        run_sql(database_url, f"REVOKE CREATE ON SCHEMA public FROM PUBLIC, {role}")
        yield as_role(database_url, role)


def _grant_select(database_url: str, reader_url: str) -> None:
    role = urlsplit(reader_url).username
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")


def _tables_made_by_the_owner(database_url: str) -> None:
    Services.build(Settings(database_url=database_url, sim_servers=1)).close()


@pytest.mark.parametrize("command", [["audit", "verify"], ["changes"],
                                     ["history", str(uuid.uuid4())]], ids=lambda c: c[0])
def test_a_select_only_role_runs_the_commands_that_only_read(
        database_url: str, reader: str, command: list[str]) -> None:
    _tables_made_by_the_owner(database_url)
    _grant_select(database_url, reader)
    done = vmledger(*command, database_url=reader, env={"VMLEDGER_LOG_FORMAT": "text"},
                    timeout=60)
    assert "Traceback" not in done.stderr and "permission denied" not in done.stderr, \
        done.stderr
    if command[0] == "history":  # a VM the log does not have: one line, status 1
        assert done.returncode == 1 and "not found" in done.stderr, done.stderr
    else:
        assert done.returncode == 0, done.stderr


def test_a_select_only_role_builds_the_services_over_existing_tables(
        database_url: str, reader: str) -> None:
    _tables_made_by_the_owner(database_url)
    _grant_select(database_url, reader)
    services = Services.build(Settings(database_url=reader), register_fleet=False)
    try:
        assert services.commands.head_position() == 1  # the owner registered its server
    finally:
        services.close()


@pytest.mark.parametrize("command", [["audit", "verify"], ["serve", "--port", "0"]],
                         ids=lambda c: c[0])
def test_a_role_that_may_not_create_the_missing_tables_is_one_line_naming_it(
        database_url: str, reader: str, command: list[str]) -> None:
    done = vmledger(*command, database_url=reader, env={"VMLEDGER_LOG_FORMAT": "text"},
                    timeout=60)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    role = urlsplit(reader).username
    assert f'role "{role}"' in line and "CREATE on schema public" in line, line
    assert "vmledger_events" in line, line  # the tables it would have made


def _refused(command: list[str], role_url: str) -> str:
    """The one line ``vmledger COMMAND`` as ``role_url``'s role ends with, status 2."""
    done = vmledger(*command, database_url=role_url,
                    env={"VMLEDGER_LOG_FORMAT": "text", "VMLEDGER_SIM_SERVERS": "1"},
                    timeout=60)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    return line


@pytest.mark.parametrize("command", [["work"], ["serve", "--port", "0"]], ids=lambda c: c[0])
def test_a_process_that_writes_with_a_role_that_may_only_read_is_one_line_naming_it(
        database_url: str, reader: str, command: list[str]) -> None:
    # tables there, but a worker's role that may only read: it met its first write in a
    # traceback (serve: "Application startup failed", status 3)
    _tables_made_by_the_owner(database_url)
    _grant_select(database_url, reader)
    line = _refused(command, reader)
    role = urlsplit(reader).username
    assert f'role "{role}" lacks INSERT, UPDATE, DELETE on ' in line, line


def test_a_privilege_missing_at_a_statement_is_one_line_naming_the_role(
        database_url: str, reader: str) -> None:
    # a role that may write rows but not create tables: a rebuild makes its shadow tables
    _tables_made_by_the_owner(database_url)
    role = urlsplit(reader).username
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public "
                     f"TO {role}")
        conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}")
    done = vmledger("rebuild", database_url=reader, env={"VMLEDGER_LOG_FORMAT": "text"},
                    timeout=60)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()[-1:]
    assert "Traceback" not in done.stderr, done.stderr
    assert f'role "{role}" lacks a privilege (permission denied for schema public)' in line, \
        line


def _grant_rows(database_url: str, reader_url: str) -> None:
    """SELECT, INSERT, UPDATE and DELETE on every table, USAGE on every sequence: a role that
    may read and write rows, and run no DDL."""
    role = urlsplit(reader_url).username
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public "
                     f"TO {role}")
        conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}")


# What an older version's database lacks that start-up's DDL would make or change
# (service/schema_undone.py), done by the owner after the tables were made.
OLDER = {
    "a fleet column": ("ALTER TABLE sim_vms DROP COLUMN config", "sim_vms.config"),
    "per-VM fences": ("DROP TABLE sim_fences; CREATE TABLE sim_fences (vm_uuid TEXT PRIMARY "
                      "KEY, epoch BIGINT NOT NULL, job_uuid TEXT NOT NULL)",
                      "sim_fences (per VM: to be keyed per server)"),
    "the claim function": ("CREATE OR REPLACE FUNCTION vmledger_claim(names TEXT[], "
                           "start_at BIGINT, reach BIGINT) RETURNS VOID LANGUAGE plpgsql "
                           "AS $$ BEGIN END $$", "function vmledger_claim (an older"),
    "an index": ("DROP INDEX job_view_vm", "index job_view_vm (missing)"),
    "a stale read model": ("INSERT INTO projection_tracking (name, position) VALUES "
                           "('job_view', 1) ON CONFLICT (name) DO UPDATE SET position = 1; "
                           "ALTER TABLE job_view DROP COLUMN vm_uuid CASCADE",
                           "job_view (stale)"),
}


@pytest.mark.parametrize("older", OLDER.values(), ids=OLDER.keys())
@pytest.mark.parametrize("command", [["work"], ["serve", "--port", "0"]], ids=lambda c: c[0])
def test_a_role_that_may_not_run_ddl_refuses_an_older_versions_database_in_one_line(
        database_url: str, reader: str, command: list[str], older: tuple[str, str]) -> None:
    """Found by review: the first statement refused skipped every later step of start-up
    silently, and the process failed later, far from the cause."""
    _tables_made_by_the_owner(database_url)
    statement, named = older
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(statement)
    _grant_rows(database_url, reader)
    line = _refused(command, reader)
    role = urlsplit(reader).username
    assert f'role "{role}" lacks ownership of the tables' in line, line
    assert named in line and "run the command once as the tables' owner" in line, line


def test_a_role_that_may_not_run_ddl_builds_over_current_tables_saying_so_once(
        database_url: str, reader: str, caplog) -> None:
    _tables_made_by_the_owner(database_url)
    _grant_rows(database_url, reader)
    caplog.set_level("WARNING", logger="vmledger")
    services = Services.build(Settings(database_url=reader, sim_servers=1))
    services.close()
    [said] = [r for r in caplog.records if "may not run DDL" in r.getMessage()]
    assert said.levelname == "WARNING"


def _refused_once(database_url: str, reader: str, command: list[str], statement: str
                  ) -> tuple[str, str]:
    """The reader's role, and the one line ``vmledger COMMAND`` as that role ends with
    (status 2) once the owner made the tables, granted the role their rows, and ran
    ``statement`` (``{role}`` standing for the role's name)."""
    _tables_made_by_the_owner(database_url)
    _grant_rows(database_url, reader)
    role = urlsplit(reader).username
    run_sql(database_url, statement.format(role=role))
    return role, _refused(command, reader)


@pytest.mark.parametrize("command", [["audit", "verify"], ["history", str(uuid.uuid4())],
                                     ["work"], ["serve", "--port", "0"]], ids=lambda c: c[0])
def test_a_table_there_that_the_role_may_not_use_is_named_as_such_not_as_missing(
        database_url: str, reader: str, command: list[str]) -> None:
    """Operator tester: a rebuild left the roles without their grants on the tables it made
    (fixed since), and the check then said 'lacks CREATE on schema public (vm_view, ...
    missing, which it would make)' or 'job_view missing': ``information_schema`` hides a
    table the role has no privilege on. The tables are there; the role lacks SELECT."""
    role, line = _refused_once(database_url, reader, command,
                               "REVOKE ALL ON job_view, vm_view FROM {role}")
    writes = command[0] in ("work", "serve")
    lacked = "SELECT, INSERT, UPDATE, DELETE" if writes else "SELECT"
    assert f'role "{role}" lacks {lacked} on job_view, vm_view (this command ' in line, line
    assert "missing" not in line and "CREATE" not in line, line


def test_the_columns_of_a_table_the_role_may_not_use_are_read(
        database_url: str, reader: str) -> None:
    # what the schema check and the runner's stale-table check read the catalogue with
    _tables_made_by_the_owner(database_url)
    app = open_ledger(Settings(database_url=reader))  # no table read: the role may read none
    try:
        db = Database(app.recorder.datastore)
        with db.transaction(commit=False) as tx:
            present = db.columns_of(tx, ["job_view", "no_such_table"])
        assert {"uuid", "vm_uuid"} <= present["job_view"] and present["no_such_table"] == set()
    finally:
        app.close()


@pytest.mark.parametrize("command", [["work"], ["serve", "--port", "0"]], ids=lambda c: c[0])
def test_a_database_that_takes_no_writes_is_one_line_saying_so(
        database_url: str, reader: str, command: list[str]) -> None:
    # a standby, or default_transaction_read_only set for the role: start-up's first DDL
    # or write ended in a traceback
    role, line = _refused_once(database_url, reader, command,
                               "ALTER ROLE {role} SET default_transaction_read_only = on")
    assert f'the database takes no writes for role "{role}" (transaction_read_only is on)' \
        in line, line
    assert "default_transaction_read_only" in line, line
