"""A job's lease that cannot be renewed during a database outage is logged as the worker's
other loop failures are (docs/operations.md, "Logs"): one WARNING line, no traceback, then at
most one line every 10 s. Operator tester: ``work`` logged ``ERROR ... renewing the lease of
job ... failed`` with a ~60-line ``PoolTimeout`` traceback on each renewal of an outage."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from types import SimpleNamespace

import psycopg
from psycopg_pool import PoolTimeout

from service.jobs.run import JobContext, JobRun, utcnow
from tests.waiting import wait_until

RUN_LOG = "vmledger.service.jobs.run"


class FailingCommands:
    """Commands whose every save raises the next of ``errors`` (the last one again)."""

    def __init__(self, *errors: Exception):
        self.errors = list(errors)
        self.calls = 0
        self.lock = threading.Lock()

    def change(self, *_args, **_kwargs):
        with self.lock:
            self.calls += 1
            error = self.errors[min(self.calls, len(self.errors)) - 1]
        raise error


def renewing(commands: FailingCommands, renewals: int) -> None:
    """A job run whose lease (30 ms) is renewed through ``commands`` ``renewals`` times."""
    context = JobContext(commands=commands, driver=None, placement=None,  # type: ignore[arg-type]
                         worker_id="w1", lease=timedelta(milliseconds=30), clock=utcnow,
                         step_attempts=1)
    vm = SimpleNamespace(id="vm-1", version=3, state="provisioning", server_uuid=None)
    run = JobRun(context, vm, {"uuid": "job-1", "name": "provision",  # type: ignore[arg-type]
                               "params": {}, "attempt": 1})
    run.keep_lease()
    try:
        wait_until(lambda: commands.calls >= renewals, f"{renewals} renewals")
    finally:
        run.release()


def test_a_lease_not_renewed_in_an_outage_is_one_warning_without_traceback(caplog):
    outage = FailingCommands(PoolTimeout("couldn't get a connection after 1.00 sec"),
                             psycopg.OperationalError("connection failed: refused"))
    with caplog.at_level(logging.INFO, logger=RUN_LOG):
        renewing(outage, renewals=10)
    lines = [r for r in caplog.records if r.name == RUN_LOG]
    assert [(r.levelname, r.getMessage()) for r in lines] == [
        ("WARNING", "renewing a job's lease failed: couldn't get a connection after 1.00 sec")]
    assert lines[0].exc_info is None


def test_a_lease_renewal_that_fails_on_a_bug_is_still_an_error_with_its_traceback(caplog):
    with caplog.at_level(logging.INFO, logger=RUN_LOG):
        renewing(FailingCommands(KeyError("lease_expires_at")), renewals=1)
    lines = [r for r in caplog.records if r.name == RUN_LOG]
    assert lines and {r.levelname for r in lines} == {"ERROR"}
    assert lines[0].exc_info is not None
    assert lines[0].getMessage() == "renewing the lease of job job-1 failed"
