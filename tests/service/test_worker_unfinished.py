"""A job its worker leaves unfinished when the database is cut off from it (docs/operations.md,
"Logs"): the warning says what becomes of the job, and that must hold for the worker itself.
Found by a tester: a worker logged ``job start left unfinished: another worker takes it over
once its lease expires``, then took it over itself 0.4 s later."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from eventsourcing.persistence import OperationalError

from service.jobs.worker import Worker
from tests.builders import create, stream
from tests.waiting import wait_until

LEASE_S = 0.6  # short: the worker gives up its retries at two thirds of it


def test_a_worker_cut_off_from_the_database_says_it_may_take_the_job_over_itself(
        services, monkeypatch, caplog) -> None:
    vm_uuid = create(services).vm_uuid
    services.projections.catch_up()
    cut = [True]
    ensure_registered = services.fleet.ensure_registered

    def cut_off(*args, **kwargs):
        if cut[0]:
            raise OperationalError("server closed the connection unexpectedly")
        return ensure_registered(*args, **kwargs)

    monkeypatch.setattr(services.fleet, "ensure_registered", cut_off)
    worker = Worker(services.commands, services.fleet,
                    find_work=services.jobs.vms_with_unfinished_jobs,
                    placement=services.worker.placement, worker_id="alone", lease_s=LEASE_S)
    with caplog.at_level(logging.WARNING, logger="vmledger"), \
            pytest.raises(OperationalError):
        worker.run_pending()
    [left] = [r.getMessage() for r in caplog.records if "left unfinished" in r.getMessage()]
    assert left == ("job provision left unfinished: a worker, this one or another, takes it "
                    "over once its lease expires")

    # No other worker exists: once the lease expired, this one takes the job over itself.
    cut[0] = False
    lease_end = datetime.fromisoformat(
        str(services.commands.load(vm_uuid).head_job["lease_expires_at"]))
    wait_until(lambda: datetime.now(UTC) > lease_end, "the job's lease to expire")
    worker.run_pending()
    started = [(e.worker, e.attempt) for e in stream(services, vm_uuid)
               if type(e).__name__ == "JobStarted"]
    assert started == [("alone", 1), ("alone", 2)]
