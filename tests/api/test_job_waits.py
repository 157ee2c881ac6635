"""Clients waiting for their jobs (WaitJob, ``sync=true``) hold no thread of the pool for the
whole wait (service/api/job_waits.py, ``wait_for_job``): more of them than the pool has threads
neither starve the routes that need one (``/ping``) nor wait past their time."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.api.helpers import vm_body
from tests.waiting import wait_until

WAITERS = 50  # more than the pool's 40 threads
WAIT_S = 3


def test_more_waiting_clients_than_pool_threads_leave_ping_answering(paused, monkeypatch):
    http = paused.http
    job_uuid = http.post("/vms", json=vm_body()).json()["job_uuid"]  # queued: no worker runs
    reads: list[int] = []
    read = paused.services.jobs.get

    def counted(*args: Any) -> Any:
        reads.append(1)
        return read(*args)

    monkeypatch.setattr(paused.services.jobs, "get", counted)
    answers: list[tuple[int, float]] = []

    def wait_job() -> None:
        started = time.monotonic()
        response = http.get(f"/jobs/{job_uuid}/wait", params={"timeout": WAIT_S})
        answers.append((response.status_code, time.monotonic() - started))

    waiters = [threading.Thread(target=wait_job) for _ in range(WAITERS)]
    for waiter in waiters:
        waiter.start()
    wait_until(lambda: len(reads) >= 2 * WAITERS)  # the clients are waiting
    started = time.monotonic()
    assert http.get("/ping").status_code == 200
    assert time.monotonic() - started < 1.5
    for waiter in waiters:
        waiter.join(WAIT_S + 10)
    assert len(answers) == WAITERS
    assert all(status == 200 and waited < WAIT_S + 1.5 for status, waited in answers), answers


def test_a_sync_action_still_answers_when_its_job_is_done(paused):
    paused.services.start_background(projections=False, worker=True)
    http = paused.http
    vm_uuid = http.post("/vms", json=vm_body(), params={"sync": "true"}).json()["vm_uuid"]
    answer = http.post(f"/vms/{vm_uuid}", params={"action": "stop", "sync": "true"})
    assert answer.status_code == 202, answer.text
    job = paused.services.jobs.get(answer.json()["job_uuid"])
    assert job is not None and job["execution"] == "succeeded"
