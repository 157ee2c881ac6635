"""A worker told to stop (docs/operations.md, "Stopping processes"): it finishes the job in hand
and claims no other, and the jobs it leaves are taken by another worker. The signals of a
``vmledger work`` process and a job left to its lease: tests/integration/test_shutdown.py."""

from __future__ import annotations

import logging
import threading

from service.jobs.worker import Worker
from tests.builders import create, stream


def _started(services, vm_uuid: str) -> list[tuple[str, int]]:
    """(worker, attempt) of every JobStarted in the VM's stream."""
    return [(e.worker, e.attempt) for e in stream(services, vm_uuid)
            if type(e).__name__ == "JobStarted"]



def hold_ensure_state(services, monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Hold the simulated fleet's next ``ensure_state`` until the second event is set; the
    first is set once a step is held there."""
    in_step, go_on = threading.Event(), threading.Event()
    ensure_state = services.fleet.ensure_state

    def held(server_uuid, vm_uuid, state, **kwargs):
        in_step.set()
        assert go_on.wait(30), "the test never let the step go on"
        return ensure_state(server_uuid, vm_uuid, state, **kwargs)

    monkeypatch.setattr(services.fleet, "ensure_state", held)
    return in_step, go_on


def test_a_stopped_worker_finishes_the_job_in_hand_and_claims_no_other(services, monkeypatch):
    vm_uuids = [create(services).vm_uuid for _ in range(3)]
    services.projections.catch_up()
    in_step, go_on = hold_ensure_state(services, monkeypatch)
    worker = Worker(services.commands, services.fleet,
                    find_work=services.jobs.vms_with_unfinished_jobs,
                    placement=services.worker.placement, worker_id="stopping")
    stop = threading.Event()
    thread = threading.Thread(target=worker.run_forever, args=(stop, 0.01), daemon=True)
    thread.start()
    assert in_step.wait(30), "the worker never reached a provision's ensure_state step"
    [in_hand] = [v for v in vm_uuids if _started(services, v)]

    stop.set()  # while the job in hand is inside a step: nothing else can have been claimed
    go_on.set()
    thread.join(30)
    assert not thread.is_alive(), "the stopped worker did not return"

    # The job in hand ran to its end, as the stopping worker.
    assert _started(services, in_hand) == [("stopping", 1)]
    assert services.commands.load(in_hand).state == "running"
    assert services.commands.load(in_hand).head_job is None
    # It claimed nothing after the stop: the other provisions are still queued, never started.
    left = [v for v in vm_uuids if v != in_hand]
    for vm_uuid in left:
        assert _started(services, vm_uuid) == []
        assert services.commands.load(vm_uuid).head_job["execution"] == "queued"
    # Another worker takes them at once: queued jobs hold no lease.
    successor = Worker(services.commands, services.fleet,
                       find_work=services.jobs.vms_with_unfinished_jobs,
                       placement=services.worker.placement, worker_id="successor")
    assert successor.run_pending() == 2
    for vm_uuid in left:
        assert _started(services, vm_uuid) == [("successor", 1)]
        assert services.commands.load(vm_uuid).state == "running"


def test_a_stopped_worker_with_nothing_in_hand_claims_nothing(services):
    create(services)
    services.projections.catch_up()
    stop = threading.Event()
    stop.set()
    assert services.worker.run_pending(stop) == 0
    services.worker.run_forever(stop, 0.01)  # returns at once
    [vm_uuid] = services.jobs.vms_with_unfinished_jobs()
    assert _started(services, vm_uuid) == []


def test_an_embedded_worker_stopped_with_a_job_in_hand_logs_that_it_left_it(
        services, monkeypatch, caplog):
    # ``serve`` waits a while for its worker thread, then closes the pool and exits: the
    # job in hand is left to its lease, and the log says so as ``vmledger work`` does
    # (tester B, B13: no line at all).
    in_step, go_on = hold_ensure_state(services, monkeypatch)
    create(services)
    services.projections.catch_up()
    services.start_background(projections=False, worker=True)
    assert in_step.wait(30), "the worker never reached a provision's ensure_state step"
    try:
        with caplog.at_level(logging.INFO, logger="vmledger"):
            services.stop_background(wait_s=0.2)
        left = [r for r in caplog.records if "left unfinished" in r.getMessage()]
        assert [r.getMessage().split(":")[0] for r in left] == ["job provision left unfinished"]
        assert left[0].levelno == logging.WARNING
        assert (left[0].job_name, left[0].outcome) == ("provision", "unfinished")
        assert any("worker" in r.getMessage() and "stopped" in r.getMessage()
                   for r in caplog.records)
    finally:
        go_on.set()
        for thread in services._threads:
            thread.join(30)
