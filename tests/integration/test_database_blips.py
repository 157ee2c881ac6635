"""Transient database errors inside a job (issue #13, input 5; docs/jobs.md, "Database
errors"): retried within the lease with back-off, so the job ends as if nothing happened.

PostgreSQL: every connection of the test database is cut (``pg_terminate_backend``) between
the provision's ``place`` and ``ensure_registered``, with a start and a stop queued behind.
SQLite: three services on one file, each with its own job worker, and 80 creates from 8
threads: no worker pass fails with "database is locked", and no job waits for a takeover.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import psycopg
import pytest

from domain.states import Action
from service.container import Services
from service.settings import Settings
from tests.builders import act, create, job, settle
from tests.conftest import ADMIN_URL
from tests.integration.test_job_faults import copies, first_calls, state_events


def terminate_backends(dbname: str) -> int:
    """Cut every connection to ``dbname`` but the admin's own; how many were cut."""
    with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        return len(conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,)).fetchall())


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_connections_cut_between_place_and_register_leave_the_jobs_unharmed(
        services, monkeypatch, database_url):
    accepted = create(services)
    stopped = act(services, accepted.vm_uuid, Action.STOP).job_uuid  # queued behind
    started = act(services, accepted.vm_uuid, Action.START).job_uuid
    cut: list[int] = []
    first_calls(monkeypatch, services.fleet, "ensure_registered",
                lambda: cut.append(terminate_backends(urlsplit(database_url).path[1:])))
    began = time.monotonic()

    settle(services)

    assert cut and cut[0] > 0, "no connection was cut"
    assert time.monotonic() - began < services.worker.lease.total_seconds() / 2
    provision = job(services, accepted.job_uuid)
    assert (provision["execution"], provision["attempt"]) == ("succeeded", 1)
    assert [job(services, j)["execution"] for j in (stopped, started)] == ["succeeded"] * 2
    assert state_events(services, accepted.vm_uuid) == ["Provisioned", "Stopped", "Started"]
    vm = services.commands.load(accepted.vm_uuid)
    assert copies(services, accepted.vm_uuid) == [(vm.server_uuid, "running")]
    assert services.fleet.boots(accepted.vm_uuid) == 2


def test_three_sqlite_services_creating_together_never_fail_a_worker_pass(
        tmp_path, caplog):
    """Three services on one SQLite file (each with its projection runner and job worker, as
    ``serve --workers 3`` has), 80 creates from 8 threads: every provision ends at its first
    attempt, none waits for a takeover, no pass fails. (Before: "worker pass failed ...
    database is locked" raised in the simulated driver's read-then-update, and the job
    stalled for its 30 s lease.)"""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'vmledger.db'}", sim_servers=4,
                        projection_poll_s=0.01, worker_poll_s=0.02)
    fleet = [Services.build(settings) for _ in range(3)]
    try:
        for services in fleet:
            services.start_background()
        with ThreadPoolExecutor(8) as pool:
            accepted = list(pool.map(lambda n: create(fleet[n % 3]), range(80)))
        began = time.monotonic()

        def provisioned() -> bool:
            return all(fleet[0].commands.load(a.vm_uuid).state != "provisioning"
                       for a in accepted)

        while not provisioned():
            assert time.monotonic() - began < 20, "a provision stalled"
            time.sleep(0.1)
        heads = [fleet[0].commands.load(a.vm_uuid) for a in accepted]
    finally:
        for services in fleet:
            services.close()
    assert {str(vm.state) for vm in heads} == {"running"}
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert failures == []
    check = Services.build(settings)
    try:
        check.projections.catch_up()
        assert {check.jobs.get(a.job_uuid)["attempt"] for a in accepted} == {1}
    finally:
        check.close()
