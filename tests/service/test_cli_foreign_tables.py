"""A database that holds a table of the service's name but of another schema (another
program's ``stored_events``, ``vmledger_events`` or ``vm_view``): every command, ``serve``
included, ends in one line naming ``VMLEDGER_DATABASE_URL``, the table and what it lacks,
status 2, never a traceback (tester; ``serve`` ended 'Application startup failed', 3)."""

from __future__ import annotations

import sqlite3
import uuid

import psycopg
import pytest

from service.database_url import sqlite_path
from projections.db import declared_columns
from service.schema_check import check_tables
from tests.cli import vmledger

# real CLI processes on edge-case databases (.ci/slow.sh), left out of the default run
pytestmark = pytest.mark.slow

# The service's tables as another program made them: the name, what it made instead, and
# a column the service needs that it lacks.
FOREIGN = {
    "events": ("{events}", "id BIGINT PRIMARY KEY, payload TEXT", "originator_id"),
    "snapshots": ("{snapshots}", "id BIGINT PRIMARY KEY, payload TEXT", "originator_id"),
    "read model": ("vm_view", "id BIGINT PRIMARY KEY, name TEXT", "owner_uuid"),
    # tester: work ended in "table sim_servers has no column named hostname" (a traceback)
    "fleet": ("sim_servers", "uuid TEXT PRIMARY KEY", "hostname"),
}
COMMANDS = [["changes"], ["history", str(uuid.uuid4())], ["audit", "verify"],
            ["serve", "--port", "0"], ["work"]]


def _make(database_url: str, kind: str) -> tuple[str, str]:
    """Create the foreign table of ``kind`` in the empty database; its name and the column
    the service would miss."""
    sqlite = database_url.startswith("sqlite")
    name, columns, missing = FOREIGN[kind]
    prefix = "stored" if sqlite else "vmledger"
    name = name.format(events=f"{prefix}_events", snapshots=f"{prefix}_snapshots")
    statement = f"CREATE TABLE {name} ({columns})"
    if sqlite:
        with sqlite3.connect(sqlite_path(database_url)) as conn:
            conn.execute(statement)
    else:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(statement)
    return name, missing


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("kind", list(FOREIGN))
def test_a_foreign_table_of_the_services_name_is_one_line_naming_it(
        database_url: str, command: list[str], kind: str) -> None:
    table, missing = _make(database_url, kind)
    done = vmledger(*command, database_url=database_url,
                    env={"VMLEDGER_LOG_FORMAT": "text", "VMLEDGER_SIM_SERVERS": "1"},
                    timeout=60)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("VMLEDGER_DATABASE_URL:"), line
    assert f"table {table}" in line and missing in line, line


def test_the_tables_the_service_made_pass_the_check(services, settings) -> None:
    # every table Services.build made has the columns the check asks of it (no false alarm)
    check_tables(settings)


def test_declared_columns_reads_a_create_statement_and_leaves_out_its_constraints() -> None:
    assert declared_columns(
        "CREATE TABLE IF NOT EXISTS t (a TEXT NOT NULL, b NUMERIC(10, 2), c TEXT DEFAULT 'x,y', "
        "PRIMARY KEY (a, b)) WITHOUT ROWID") == ("t", ["a", "b", "c"])
    assert declared_columns("CREATE INDEX IF NOT EXISTS i ON t (a)") is None


# The simulated fleet's tables as their first version made them (git log -p of
# service/jobs/compute/simulated.py): without the columns added since
OLDER_FLEET = (
    "CREATE TABLE sim_servers (uuid TEXT PRIMARY KEY, hostname TEXT NOT NULL, boot_id TEXT "
    "NOT NULL, ram_mib INTEGER NOT NULL, cpus INTEGER NOT NULL)",
    "CREATE TABLE sim_vms (vm_uuid TEXT NOT NULL, server_uuid TEXT NOT NULL, state TEXT NOT "
    "NULL, ram_mib INTEGER NOT NULL, boots INTEGER NOT NULL, PRIMARY KEY (vm_uuid, "
    "server_uuid))",
)


def test_an_older_fleet_table_passes_the_check_and_gets_the_columns_added_since(
        database_url: str) -> None:
    from service.container import Services
    from service.jobs.compute.simulated import ADDED_COLUMNS
    from service.settings import Settings

    for statement in OLDER_FLEET:
        if database_url.startswith("sqlite"):
            with sqlite3.connect(sqlite_path(database_url)) as conn:
                conn.execute(statement)
        else:
            with psycopg.connect(database_url, autocommit=True) as conn:
                conn.execute(statement)
    settings = Settings(database_url=database_url, sim_servers=2)
    check_tables(settings)  # no refusal: only columns the fleet adds are missing
    services = Services.build(settings)
    try:
        with services.db.transaction(commit=False) as tx:
            for table, column, _kind in ADDED_COLUMNS:
                assert column in services.db.columns(tx, table), (table, column)
        assert [server.status for server in services.fleet.servers()] == ["running"] * 2
    finally:
        services.close()
    check_tables(settings)
