"""Stopping real processes (docs/operations.md, "Stopping processes"), on PostgreSQL (production
mode): a ``vmledger work`` process told to stop keeps its job's lease alive and claims
nothing more; told twice, it exits leaving that job to its lease, which another worker takes
over only once it has expired. ``vmledger serve`` answers a request in flight before it exits.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.container import Services
from service.settings import Settings
from service.jobs.worker import Worker, utcnow
from tests.builders import create, settle, stream
from tests.conftest import _empty_schema
from tests.cli import vmledger_process
from tests.integration.processes import free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.postgres

LEASE_S = 3.0


@pytest.fixture
def services(postgres_url: str) -> Iterator[Services]:
    """The test's own handle on an empty PostgreSQL database the processes share."""
    _empty_schema(postgres_url)
    built = Services.build(Settings(database_url=postgres_url, sim_servers=2,
                                    job_lease_s=LEASE_S, worker_poll_s=0.02))
    try:
        yield built
    finally:
        built.close()


def start(services: Services, log_path: Path, *args: str, **env: str) -> subprocess.Popen:
    """``vmledger ARGS`` on the test's database, open (no tokens), JSON logs to
    ``log_path``."""
    return vmledger_process(*args, log_path=log_path, database_url=services.settings.database_url,
                            env={"VMLEDGER_SIM_SERVERS": "2", "VMLEDGER_JOB_LEASE_S": str(LEASE_S),
                                 "VMLEDGER_WORKER_POLL_S": "0.02",
                                 "VMLEDGER_PROJECTION_POLL_S": "0.01",
                                 "VMLEDGER_LOG_FORMAT": "json",
                                 "VMLEDGER_TOKENS": None, "VMLEDGER_TOKENS_FILE": None, **env})


def json_lines(log_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]


def logged(log_path: Path, text: str) -> bool:
    return any(text in line["message"] for line in json_lines(log_path))


def event_names(services: Services, vm_uuid: str) -> list[str]:
    return [type(e).__name__ for e in stream(services, vm_uuid)]


@pytest.mark.slow  # a long run of real processes (.ci/slow.sh)
def test_a_stopped_worker_process_leaves_its_job_to_its_lease_and_claims_no_other(
    services: Services, tmp_path: Path
) -> None:
    held = create(services)  # its provision will be claimed first (the older job)
    queued = create(services)
    # The provision's second step waits 10 minutes: the job is in hand for the whole test.
    services.fleet.faults.set_latency(600.0, "ensure_registered")
    services.projections.catch_up()
    log_path = tmp_path / "work.log"
    process = start(services, log_path, "work")
    try:
        head = wait_until(lambda: (h := services.commands.load(held.vm_uuid).head_job)
                          and h["execution"] == "running" and h, "the provision's claim",
                          log_path=log_path)
        worker_id = head["worker"]

        process.send_signal(signal.SIGTERM)
        wait_until(lambda: logged(log_path, "SIGTERM: taking no new jobs"), "the first signal",
                   log_path=log_path)
        # Stopping does not give the job up: its lease is still renewed while it runs.
        renewed = event_names(services, held.vm_uuid).count("JobLeaseRenewed")
        wait_until(
            lambda: event_names(services, held.vm_uuid).count("JobLeaseRenewed") > renewed,
            "a lease renewal after the stop", log_path=log_path)

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    [left] = [line for line in json_lines(log_path)
              if line["message"].startswith("job provision left unfinished")]
    assert (left["level"], left["vm_uuid"], left["job_uuid"]) == (
        "WARNING", held.vm_uuid, held.job_uuid)
    # Nothing was released, failed or claimed on the way out.
    head = services.commands.load(held.vm_uuid).head_job
    assert (head["uuid"], head["execution"], head["worker"], head["attempt"]) == (
        held.job_uuid, "running", worker_id, 1)
    assert not {"JobSucceeded", "JobFailed", "JobCanceled"} & set(
        event_names(services, held.vm_uuid))
    assert "JobStarted" not in event_names(services, queued.vm_uuid)

    # Another worker may take the job over only once its lease has expired.
    services.fleet.faults.clear()
    expires = datetime.fromisoformat(head["lease_expires_at"])
    successor = Worker(services.commands, services.fleet,
                       find_work=services.jobs.vms_with_unfinished_jobs,
                       placement=services.worker.placement, lease_s=LEASE_S,
                       worker_id="successor")
    refused = successor.run_vm(held.vm_uuid)
    assert utcnow() < expires and not refused, "taken over while its lease held"
    wait_until(lambda: successor.run_vm(held.vm_uuid), "the takeover", log_path=log_path,
               timeout=LEASE_S + 30)
    [takeover] = [e for e in stream(services, held.vm_uuid)
                  if type(e).__name__ == "JobStarted" and e.worker == "successor"]
    # Its claim's clock (the lease it took runs LEASE_S from it) was past the old expiry.
    assert takeover.lease_expires_at - successor.lease >= expires
    assert takeover.attempt == 2
    # The job it never started is the successor's at once (a queued job holds no lease).
    assert successor.run_vm(queued.vm_uuid)
    assert services.commands.load(queued.vm_uuid).state == "running"


def test_serve_answers_a_request_in_flight_before_it_exits(
    services: Services, tmp_path: Path
) -> None:
    vm_uuid = create(services).vm_uuid
    settle(services)
    services.fleet.faults.pause_workers(True)  # the stop job will wait until the test says
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    process = start(services, log_path, "serve", "--port", str(port),
                    VMLEDGER_EMBEDDED_RUNNERS="true")
    answered: list[httpx.Response | BaseException] = []
    try:
        wait_until(lambda: logged(log_path, "Application startup complete"), "serve",
                   log_path=log_path)

        def stop_and_wait() -> None:
            try:
                answered.append(httpx.post(f"{base}/vms/{vm_uuid}",
                                           params={"action": "stop", "sync": "true"},
                                           timeout=60))
            except BaseException as error:  # noqa: BLE001 - reported below
                answered.append(error)

        client = threading.Thread(target=stop_and_wait)
        client.start()
        # The request is in the server once its job is queued; it waits for the job to end.
        wait_until(lambda: services.commands.load(vm_uuid).head_job, "the stop to be queued",
                   log_path=log_path)
        process.send_signal(signal.SIGTERM)
        wait_until(lambda: logged(log_path, "Shutting down"), "uvicorn to begin its shutdown",
                   log_path=log_path)
        assert not answered, "answered before its job ran"
        services.fleet.faults.pause_workers(False)
        client.join(60)
        # uvicorn, once its graceful shutdown is done, raises the signal it caught again
        assert process.wait(timeout=30) == -signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    [response] = answered
    assert isinstance(response, httpx.Response), response
    assert response.status_code == 202
    assert services.commands.load(vm_uuid).state == "stopped"
    assert "JobSucceeded" in event_names(services, vm_uuid)[-2:]
