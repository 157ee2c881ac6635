"""Transient database errors inside a job (issue #13, input 5; docs/jobs.md, "Database
errors"): retried within the lease with back-off, so the job ends as if nothing happened.

PostgreSQL: every connection of the test database is cut (``pg_terminate_backend``) between
the provision's ``place`` and ``ensure_registered``, with a start and a stop queued behind.
SQLite: ``serve --workers 2`` (two real processes, each with its own job worker) and 40
creates from 8 threads: no worker pass fails with "database is locked", and no job waits for a
takeover.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from domain.states import Action
from tests.api.helpers import vm_body
from tests.builders import act, create, settle
from tests.conftest import ADMIN_URL
from tests.integration.processes import free_port, vmledger_process, wait_until
from tests.integration.test_job_faults import copies, first_calls, job, state_events


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


def test_two_sqlite_serve_processes_creating_together_never_fail_a_worker_pass(tmp_path):
    database_url = f"sqlite:///{tmp_path / 'vmledger.db'}"
    port = free_port()
    log_path = str(tmp_path / "serve.log")
    env = {**os.environ, "VMLEDGER_DATABASE_URL": database_url, "VMLEDGER_SIM_SERVERS": "4",
           "VMLEDGER_WORKER_POLL_S": "0.02", "VMLEDGER_PROJECTION_POLL_S": "0.01",
           "VMLEDGER_LOG_FORMAT": "text"}
    server = vmledger_process("serve", "--port", str(port), "--workers", "2", env=env,
                              log_path=log_path)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(base), what="the API", log_path=log_path)
        with httpx.Client(base_url=base, timeout=30) as http, ThreadPoolExecutor(8) as pool:
            lock = threading.Lock()
            jobs: list[str] = []

            def create_five() -> None:
                for _ in range(5):
                    answer = http.post("/vms", json=vm_body())
                    assert answer.status_code == 202, answer.text
                    with lock:
                        jobs.append(answer.json()["job_uuid"])

            for future in [pool.submit(create_five) for _ in range(8)]:
                future.result()
            began = time.monotonic()

            def all_done() -> bool:
                return all(http.get(f"/jobs/{j}").json()["execution"] == "succeeded"
                           for j in jobs)

            # Well inside the 30 s lease a stalled job would wait for its takeover.
            wait_until(all_done, what="every provision", log_path=log_path, timeout=20)
            attempts = {http.get(f"/jobs/{j}").json().get("attempt", 1) for j in jobs}
        elapsed = time.monotonic() - began
    finally:
        server.terminate()
        server.wait(timeout=30)
    with open(log_path) as log:
        text = log.read()
    assert "database is locked" not in text
    assert "worker pass failed" not in text
    assert len(jobs) == 40 and attempts <= {1}, attempts
    assert elapsed < 20


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/ping", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
