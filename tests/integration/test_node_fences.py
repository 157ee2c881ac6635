"""Each simulated server keeps its own fences, as a real compute node does (docs/simulation.md;
service/jobs/compute/fences.py): a fence raised on one server refuses nothing on another, so
a job that must fence off a lost worker is tested on every server it asks. A database an
older version made, whose ``sim_fences`` kept one fence per VM for every server, keeps that
guarantee: start-up carries each VM's fence to every server. Both backends."""

from __future__ import annotations

import sqlite3
import uuid

import psycopg
import pytest

from projections.db import Dialect
from service.container import Services
from service.database_url import sqlite_path
from service.jobs.compute.driver import Fence, FencedOffError
from service.jobs.compute.simulated import simulated_server_uuid
from service.schema_check import check_tables
from service.settings import Settings
from tests.integration.test_fencing import NEWER, OLDER, OTHER_SERVER, SERVER, a_running_copy

# sim_fences as the versions before per-node fences made it (git log -p of
# service/jobs/compute/fences.py)
PER_VM_TABLE = ("CREATE TABLE sim_fences (vm_uuid TEXT PRIMARY KEY, epoch BIGINT NOT NULL, "
                "job_uuid TEXT NOT NULL)")
SERVERS = [simulated_server_uuid(index) for index in range(3)]


def test_a_fence_raised_on_one_server_refuses_nothing_on_another(services) -> None:
    fleet = services.fleet
    vm_uuid = a_running_copy(fleet)  # on SERVER
    fleet.raise_fence(SERVER, vm_uuid, fence=NEWER)

    with pytest.raises(FencedOffError, match=f"on server {SERVER}"):
        fleet.ensure_state(SERVER, vm_uuid, "stopped", fence=OLDER)
    fleet.ensure_registered(OTHER_SERVER, vm_uuid, ram_mib=128, metadata={}, fence=OLDER)
    assert fleet.ensure_state(OTHER_SERVER, vm_uuid, "running", effect="job-a",
                              fence=OLDER).state == "running"
    assert {c["server_uuid"]: c["state"] for c in fleet.copies(vm_uuid)} == {
        SERVER: "running", OTHER_SERVER: "running"}


def _older_database(database_url: str, fences: list[tuple[str, int, str]]) -> None:
    """A database as an older version left it: three servers, and ``sim_fences`` per VM
    holding ``fences`` (vm_uuid, epoch, job_uuid)."""
    Services.build(Settings(database_url=database_url, sim_servers=3)).close()
    statements = ["DROP TABLE sim_fences", PER_VM_TABLE]
    if database_url.startswith("sqlite"):
        with sqlite3.connect(sqlite_path(database_url)) as conn:
            for statement in statements:
                conn.execute(statement)
            conn.executemany("INSERT INTO sim_fences VALUES (?, ?, ?)", fences)
    else:
        with psycopg.connect(database_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)
            with conn.cursor() as cursor:
                cursor.executemany("INSERT INTO sim_fences VALUES (%s, %s, %s)", fences)


def test_an_older_per_vm_fences_table_is_carried_to_every_server_at_start_up(
        database_url: str) -> None:
    fenced, other = str(uuid.uuid4()), str(uuid.uuid4())
    _older_database(database_url, [(fenced, NEWER.epoch, NEWER.job_uuid), (other, 3, "job-c")])
    settings = Settings(database_url=database_url, sim_servers=3)
    check_tables(settings)  # an older table of ours, not another program's
    services = Services.build(settings)
    try:
        fleet = services.fleet
        for server in SERVERS:  # the old guarantee: refused on every server
            with pytest.raises(FencedOffError, match=f"epoch 9 .job job-b. on server {server}"):
                fleet.ensure_registered(server, fenced, ram_mib=128, metadata={}, fence=OLDER)
        assert fleet.copies(fenced) == []
        # from now on each server keeps its own: a newer fence on one leaves the others be
        fleet.raise_fence(SERVERS[0], other, fence=Fence("job-d", 7))
        fleet.raise_fence(SERVERS[1], other, fence=Fence("job-c", 3))
        with pytest.raises(FencedOffError):
            fleet.raise_fence(SERVERS[2], other, fence=Fence("job-b", 2))
        with pytest.raises(FencedOffError):
            fleet.raise_fence(SERVERS[0], other, fence=Fence("job-c", 3))
        with services.db.transaction(commit=False) as tx:
            assert "sim_fences_per_vm" not in _tables(services, tx)
            if services.db.dialect is Dialect.POSTGRES:  # named as a new database names it
                tx.execute("SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint "
                           "WHERE conrelid = 'sim_fences'::regclass")
                assert tx.fetchall() == [{"conname": "sim_fences_pkey",
                                          "def": "PRIMARY KEY (server_uuid, vm_uuid)"}]
    finally:
        services.close()
    again = Services.build(settings)  # a second start-up finds nothing to carry
    try:
        with pytest.raises(FencedOffError):
            again.fleet.observe(SERVERS[1], fenced, fence=OLDER)
    finally:
        again.close()
    check_tables(settings)


def _tables(services, tx) -> set[str]:
    """The names of the tables the database holds now."""
    if services.db.dialect is Dialect.SQLITE:
        tx.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {row["name"] for row in tx.fetchall()}
    tx.execute("SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema()")
    return {row["name"] for row in tx.fetchall()}
