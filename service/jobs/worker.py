"""The job worker: takes the head job of a VM's queue (the ticket) and drives the compute
driver through its steps.

A worker claims a job by appending ``JobStarted`` at the version it read, so two workers (or
two processes) racing for one job cannot both win. Each finished step is recorded before the
next begins, and every save re-checks that this worker still holds the job.
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from datetime import datetime, timedelta

import psycopg
from eventsourcing.persistence import PersistenceError

from domain.errors import DamagedStreamError, DomainError, JobNotRunnableError, VmNotFoundError
from domain.states import Execution
from domain.vm import Cause, Vm, make_cause
from service import metrics
from service.commands.application import Commands
from service.jobs import handlers as jobs
from service.jobs import takeovers
from service.jobs.compute.driver import ComputeDriver
from service.jobs.run import JobContext, JobRun, Placement, lease_failures, utcnow
from service.logs import Throttled, log_context

log = logging.getLogger(f"vmledger.{__name__}")

__all__ = ["Placement", "Worker", "stop_on_signals", "utcnow"]

# The database's errors (its pool's timeout is a psycopg one): they are every VM's, not one's.
DATABASE_ERRORS: tuple[type[Exception], ...] = (PersistenceError, psycopg.Error, sqlite3.Error)


class Worker:
    """Runs VMs' head jobs. Several workers (threads or processes) may run at once."""

    def __init__(
        self,
        commands: Commands,
        driver: ComputeDriver,
        *,
        find_work: Callable[[], list[str]],
        placement: Placement,
        lease_s: float = 30.0,
        worker_id: str | None = None,
        clock: Callable[[], datetime] = utcnow,
        paused: Callable[[], bool] = lambda: False,
        step_attempts: int = 3,
        max_attempts: int = 3,
        periodic: Callable[[], object] | None = None,
        periodic_s: float = 30.0,
        renew_leases: bool = True,
        unfinished: str = "a worker, this one or another, takes it over once its lease "
                          "expires",
    ):
        """``renew_leases``: False for a worker nothing competes with, whose jobs end long
        before their lease (the trace replay, the only writer): no renewal thread a job.
        ``unfinished``: what becomes of a job this worker leaves unfinished, as its warning
        says it: by default any worker's, this one's too, whose next pass after the lease
        takes it again (it said another's, and the worker cut off from the database took it
        over itself 0.4 s later: a tester); the trace replay's is no worker's to take over."""
        self.commands = commands
        self.driver = driver
        self.find_work = find_work
        self.placement = placement
        self.lease = timedelta(seconds=lease_s)
        # The process id in it tells an operator (and a fault test) which process holds a job.
        self.worker_id = worker_id or f"worker-{os.getpid()}-{uuidlib.uuid4().hex[:6]}"
        self.clock = clock
        self.paused = paused
        self.step_attempts = step_attempts
        self.max_attempts = max_attempts
        self.periodic = periodic  # the stuck-VM check, every ``periodic_s`` seconds
        self.periodic_s = periodic_s
        self.unfinished = unfinished
        self.renew_leases = renew_leases
        self._periodic_at = 0.0
        self._periodic_lock = threading.Lock()  # one check at a time (``_run_periodic``)
        self._wake = threading.Event()
        # The job this worker is running, if any (``left_in_hand`` reads it from another
        # thread when the process gives up waiting for it).
        self._in_hand: JobRun | None = None
        # The VMs the last pass passed over, their stream damaged, and why (``run_pending``).
        self._damaged: dict[str, str] = {}
        # The VMs the last pass passed over because their load or job raised, and why.
        self._failing: dict[str, str] = {}
        # Lease renewals a database outage failed, of all this worker's jobs: one line a 10 s.
        self._lease_failed = lease_failures()

    def job_context(self) -> JobContext:
        """What a run of a job this worker claimed works with."""
        return JobContext(commands=self.commands, driver=self.driver, placement=self.placement,
                          worker_id=self.worker_id, lease=self.lease, clock=self.clock,
                          step_attempts=self.step_attempts, lease_failed=self._lease_failed)

    def run_vm(self, vm_uuid: str, stop: threading.Event | None = None) -> bool:
        """Claim and run the VM's head job if it is free; True if a job ran. Its log lines
        carry the VM, the job and this worker as the actor (service/logs.py).

        Once ``stop`` is set no job is claimed (False); a job claimed before is run to its end.
        """
        metrics.export_worker_metrics()  # this process runs a worker: its metrics are served
        vm = self.commands.load(vm_uuid)
        head = vm.head_job
        if head is None:
            return False
        now = self.clock()
        if head["execution"] == Execution.RUNNING and datetime.fromisoformat(head["lease_expires_at"]) > now:
            return False
        actor = f"worker:{self.worker_id}"
        with log_context(actor=actor, vm_uuid=vm_uuid, job_uuid=head["uuid"]):
            return self._claim_and_run(vm_uuid, head["uuid"], now,
                                       make_cause(actor, job_uuid=head["uuid"]), stop)

    def _claim_and_run(self, vm_uuid: str, job_uuid: str, now: datetime, cause: Cause,
                       stop: threading.Event | None) -> bool:
        if stop is not None and stop.is_set():
            return False  # stopping: the last moment a claim can be given up
        try:
            _, vm, _, _ = self.commands.change(Vm, vm_uuid, lambda v: v.start_job(
                job_uuid, worker=self.worker_id, now=now, lease_expires_at=now + self.lease,
                cause=cause))
        except JobNotRunnableError:
            return False
        run = JobRun(self.job_context(), vm, vm.head_job)
        fields = {"job_name": run.job["name"], "attempt": run.attempt, "worker": self.worker_id}
        after_a_wait = bool(run.job.get("after_a_wait"))
        taken_over = run.attempt > 1 and not after_a_wait
        if taken_over:
            # Started before and still running, but its lease had expired (``start_job``
            # refuses otherwise): the worker that held it was lost, and this one took it over.
            # Not so when that attempt ended waiting for a server (takeovers._wait_for): it
            # left its lease to expire on purpose, so that this one asks again.
            metrics.LEASE_TAKEOVERS.inc()
        log.info("job %s started (attempt %d%s)", run.job["name"], run.attempt,
                 ", taken over after its lease expired" if taken_over
                 else ", asking again after a wait for a server" if after_a_wait else "",
                 extra=fields)
        if self.renew_leases:
            run.keep_lease()
        self._in_hand = run
        try:
            # attempts that ended waiting for a server are no lost workers': not counted
            if run.attempt - run.job.get("waits", 0) > self.max_attempts:
                takeovers.give_up(run)
            else:
                jobs.run(run)
        except JobNotRunnableError as lost:
            run.outcome = "lost"
            log.info("job %s was taken from %s: %s", job_uuid, self.worker_id, lost.reason,
                     extra=fields)
        except DomainError as refusal:
            log.exception("job %s hit a domain refusal", job_uuid, extra=fields)
            run.fail(str(refusal) or type(refusal).__name__)
        finally:
            self._in_hand = None
            run.release()
            if run.outcome == "succeeded":
                log.info("job %s succeeded", run.job["name"],
                         extra={**fields, "outcome": run.outcome})
            elif run.outcome == "failed":
                # a WARNING with the job's error, so the line says why (it said only that)
                log.warning("job %s failed: %s", run.job["name"], run.error,
                            extra={**fields, "outcome": run.outcome, "error": run.error})
            elif run.outcome is None:
                _log_unfinished(run, self.worker_id, self.unfinished)
        return True

    def left_in_hand(self) -> None:
        """Say that this worker is stopped and gives up the job it is still running (if
        any), as ``run_forever`` and ``_claim_and_run`` would had it ended: for a process that
        stops waiting for its worker thread (embedded ``serve``), whose daemon thread then
        dies with it and logs nothing (docs/operations.md, "Logs")."""
        run = self._in_hand
        if run is not None and run.outcome is None:
            with log_context(actor=f"worker:{self.worker_id}", vm_uuid=str(run.vm.id),
                             job_uuid=run.job_uuid):
                _log_unfinished(run, self.worker_id, self.unfinished)
        log.info("worker %s stopped: it takes no more jobs", self.worker_id)

    def run_pending(self, stop: threading.Event | None = None) -> int:
        """One pass over the VMs with unfinished jobs; how many jobs ran (none while paused).
        Once ``stop`` is set it claims no further job and ends the pass. A VM whose stream
        cannot be folded (``DamagedStreamError``), or whose stream is gone from the log, is
        passed over, so that it holds up no other VM's jobs (``_note_damaged``); so is a VM
        whose load or job raises any other error that is not the database's
        (``_note_failing``: a fold that recursed too deep on a value an older version
        stored stopped every job of the fleet). A database error ends the pass."""
        metrics.export_worker_metrics()  # a paused worker's are served too
        if self.paused():
            return 0
        ran = 0
        damaged: dict[str, str] = {}
        failing: dict[str, str] = {}
        for vm_uuid in self.find_work():
            try:
                while self.run_vm(vm_uuid, stop):
                    ran += 1
            except DamagedStreamError as error:  # that VM's business alone: on to the next
                damaged[vm_uuid] = str(error)
            except VmNotFoundError:  # its whole stream gone, its jobs still in job_view
                damaged[vm_uuid] = f"stream {vm_uuid} is not in the log, though its jobs are"
            except DATABASE_ERRORS:
                raise  # every VM's: the pass ends, and run_forever says so
            except Exception as error:  # noqa: BLE001 - that VM's alone: on to the next
                # said once per VM and kind: a message may differ every pass
                failing[vm_uuid] = type(error).__name__
                self._note_failing(vm_uuid, error)
            if stop is not None and stop.is_set():
                break
        self._note_damaged(damaged)
        self._failing = failing
        metrics.FAILING_VMS_PASSED.set(len(failing))
        return ran

    def _note_damaged(self, damaged: dict[str, str]) -> None:
        """Say which VMs' jobs this pass passed over because their stream cannot be folded
        (VM -> why): a warning when a VM is first passed over (or for another reason), not
        every pass, and the gauge ``vmledger_worker_damaged_streams``. Their jobs stay as
        they are until the log is repaired (docs/jobs.md, "A damaged stream")."""
        for vm_uuid, why in damaged.items():
            if self._damaged.get(vm_uuid) != why:
                log.warning("jobs of VM %s passed over: %s; the log needs repair (vmledger "
                            "audit verify names what is wrong)", vm_uuid, why,
                            extra={"vm_uuid": vm_uuid})
        self._damaged = damaged
        metrics.DAMAGED_STREAMS_PASSED.set(len(damaged))

    def _note_failing(self, vm_uuid: str, error: Exception) -> None:
        """Say that this pass passed over VM ``vm_uuid`` because loading it or running its
        job raised ``error``, when it first fails so (or with another kind of error), not
        every pass; the gauge ``vmledger_worker_failing_vms`` counts such VMs (docs/jobs.md,
        "A VM that fails"). A value nested past Python's limit (``RecursionError``: data an
        older version stored) is a warning; any other error is a bug in vmledger, an ERROR
        with its traceback, which docs/operations.md says to alert on."""
        if self._failing.get(vm_uuid) == type(error).__name__:
            return
        level = logging.WARNING if isinstance(error, RecursionError) else logging.ERROR
        log.log(level, "jobs of VM %s passed over: %s: %s", vm_uuid, type(error).__name__,
                error, exc_info=error, extra={"vm_uuid": vm_uuid})

    def _run_periodic(self) -> None:
        """Run the periodic check (the stuck-VM check) when ``periodic_s`` has passed since
        the last. Paused workers run it too: a pause (``POST /sim/workers?action=pause``) is
        a fault of the workers' claiming, and the check is the operator's safety net for a
        VM whose job does not run, as a stuck VM's is then (docs/simulation.md)."""
        if not self._periodic_lock.acquire(blocking=False):
            return  # the other thread runs it now (``_periodic_while_in_a_job``)
        try:
            now = time.monotonic()
            if self.periodic is not None and now - self._periodic_at >= self.periodic_s:
                self._periodic_at = now
                self.periodic()
        finally:
            self._periodic_lock.release()

    def _periodic_while_in_a_job(self, stop: threading.Event) -> None:
        """Run the periodic check while this worker's thread is inside a job, until ``stop``:
        between jobs ``run_forever`` runs it, but a job whose node hangs holds that thread
        (renewing its lease) for as long as the node hangs, and the check is what
        quarantines such a VM. Found by a tester: with one worker (the embedded default)
        a hung job's VM was never quarantined."""
        failed = Throttled(log, "stuck check failed", traceback=True)
        while not stop.wait(min(self.periodic_s, 1.0)):
            if self._in_hand is not None:
                try:
                    self._run_periodic()
                except Exception as error:  # noqa: BLE001 - the check must outlive one failure
                    failed(error)

    def wake(self) -> None:
        """Look for work now rather than at the next poll."""
        self._wake.set()

    def run_forever(self, stop: threading.Event, poll_s: float,
                    on_error: Callable[[BaseException], None] | None = None) -> None:
        """Run pending jobs until ``stop`` is set, waiting ``poll_s`` (or a wake-up) between.

        A failed pass is given to ``on_error`` and tried again after ``poll_s``. By default
        it is logged as ``vmledger project`` logs its own (docs/operations.md, "Logs"): the
        first with its traceback, then at most one line every 10 s counting those left out,
        so a database outage does not write a traceback every pass (10,000 lines in minutes).

        Shutting down (docs/operations.md, "Stopping processes"): once ``stop`` is set the
        worker claims no new job; the job it is running goes on to its end (its lease still
        renewed), and then this returns. Nothing is released or failed on the way out: a job
        the process does not live to finish keeps its lease until it expires, and then
        another worker takes it over.
        """
        failed = on_error or Throttled(log, "worker pass failed", traceback=True)
        if self.periodic is not None:
            threading.Thread(target=self._periodic_while_in_a_job, args=(stop,), daemon=True,
                             name="vmledger-stuck-check").start()
        while not stop.is_set():
            self._wake.clear()
            try:
                self._run_periodic()
                self.run_pending(stop)
            except Exception as error:  # noqa: BLE001 - a worker must outlive one bad pass
                failed(error)
                stop.wait(poll_s)
            if not stop.is_set():
                self._wake.wait(poll_s)
        log.info("worker %s stopped: it takes no more jobs", self.worker_id)


def _log_unfinished(run: JobRun, worker_id: str, unfinished: str) -> None:
    """The warning for a job its worker gave up without ending it (an error, or stopped),
    saying what becomes of it (``unfinished``)."""
    log.warning("job %s left unfinished: %s", run.job["name"], unfinished,
                extra={"job_name": run.job["name"], "attempt": run.attempt,
                       "worker": worker_id, "outcome": "unfinished"})


def stop_on_signals(worker: Worker) -> threading.Event:
    """Shutdown of a ``vmledger work`` process (docs/operations.md, "Stopping processes").

    Returns the event to give ``worker.run_forever``. The first SIGINT or SIGTERM sets it: the
    worker takes no new job and finishes the one in hand. A second raises ``SystemExit(1)``
    in the main thread (where the job runs), so the process ends at once, leaving that job
    running under its lease: no event is appended for it, and another worker takes it over
    when the lease expires. Call from the main thread.
    """
    stop = threading.Event()

    def handle(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            log.warning("%s again: exiting now; a job in hand keeps its lease until it "
                        "expires, then another worker takes it over", name)
            raise SystemExit(1)
        stop.set()
        worker.wake()
        log.info("%s: taking no new jobs; a job in hand runs to its end (send %s again to "
                 "leave it to its lease)", name, name)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, handle)
    return stop
