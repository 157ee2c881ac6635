"""The job worker: takes the head job of a VM's queue (the ticket) and drives the compute
driver through its steps.

A worker claims a job by appending ``JobStarted`` at the version it read, so two workers (or
two processes) racing for one job cannot both win. Each finished step is recorded before the
next begins, and every save re-checks that this worker still holds the job.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from domain.errors import DomainError, JobNotRunnableError
from domain.vm import Cause, Vm, make_cause
from projections.formats import rfc3339
from service import metrics
from service.application import Commands
from service.compute.driver import ComputeDriver, ComputeError
from service.logs import log_context

log = logging.getLogger(__name__)

# The servers to try, best first (the claim on each server's stream decides).
Placement = Callable[[Vm], list[str]]


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


class StepFailedError(Exception):
    """A job step failed; the job ends failed with this message."""


class PreconditionFailedError(StepFailedError):
    """The VM changed under the job (another writer moved it on): the next step is not run."""


class JobRun:
    """One claimed job being worked on: records steps and the outcome as this worker, keeps
    its lease alive, and runs no step whose preconditions no longer hold (Omicron #2209)."""

    def __init__(self, worker: Worker, vm: Vm, job: dict[str, Any]):
        self.worker = worker
        self.vm = vm
        self.job = job
        self.job_uuid: str = job["uuid"]
        self.params: dict[str, Any] = job["params"]
        self.attempt: int = job["attempt"]
        self.steps_recorded = 0
        self.last_step_failed = False
        self.cause = make_cause(f"worker:{worker.worker_id}", job_uuid=self.job_uuid)
        # What the steps assume of the VM: where it was, as it was, when the job was claimed.
        self.expected = (str(vm.state), vm.server_uuid)
        self._lost: JobNotRunnableError | None = None
        # How the job ended here: succeeded, failed, lost (taken over), None while running.
        self.outcome: str | None = None
        self._done = threading.Event()
        self._heartbeat: threading.Thread | None = None

    @property
    def driver(self) -> ComputeDriver:
        return self.worker.driver

    # -- the lease --------------------------------------------------------------------------

    def keep_lease(self) -> None:
        """Renew the lease every third of its length until ``release`` (a daemon thread)."""
        self._heartbeat = threading.Thread(  # in a copy of the job's log scope
            target=contextvars.copy_context().run, args=(self._renew_until_done,),
            name=f"lease-{self.job_uuid[:8]}", daemon=True)
        self._heartbeat.start()

    def release(self) -> None:
        """Stop renewing the lease (the job ended, or was lost)."""
        self._done.set()
        if self._heartbeat is not None:
            self._heartbeat.join()

    def _renew_until_done(self) -> None:
        lease = self.worker.lease
        while not self._done.wait(lease.total_seconds() / 3):
            expires = self.worker.clock() + lease
            try:
                self.worker.commands.change(self.vm.id, lambda vm: vm.renew_lease(
                    self.job_uuid, worker=self.worker.worker_id, lease_expires_at=expires,
                    cause=self.cause))
            except JobNotRunnableError as lost:
                self._lost = lost
                return
            except Exception:  # noqa: BLE001 - keep trying: the lease is not lost yet
                log.exception("renewing the lease of job %s failed", self.job_uuid)

    # -- steps ------------------------------------------------------------------------------

    def _change(self, mutate: Callable[[Vm], None]) -> Vm:
        if self._lost is not None:
            raise self._lost
        _, vm, _ = self.worker.commands.change(self.vm.id, mutate)
        self.vm = vm
        return vm

    def _check_preconditions(self, name: str) -> None:
        found = (str(self.vm.state), self.vm.server_uuid)
        if found != self.expected:
            error = (f"not run: the VM changed while the job ran (state {self.expected[0]} on "
                     f"{self.expected[1]}, now {found[0]} on {found[1]})")
            self.record_step(name, result=None, error=error)
            raise PreconditionFailedError(error)

    def step(self, name: str, operation: Callable[[], Any]) -> Any:
        """Run ``operation`` as step ``name`` and record it (a ``chain_results`` entry); a
        failed call is recorded and tried again, ``worker.step_attempts`` times in all.

        Raises ``StepFailedError`` when every attempt failed (``PreconditionFailedError`` when
        the VM changed under the job, before anything was run), and ``JobNotRunnableError`` if
        the job was taken from this worker.
        """
        for attempt in range(1, self.worker.step_attempts + 1):
            self._check_preconditions(name)
            started = utcnow()
            try:
                result = operation()
            except ComputeError as failure:
                error = str(failure) or type(failure).__name__
                self.record_step(name, result=None, error=error, started=started)
                if attempt == self.worker.step_attempts:
                    raise StepFailedError(error) from failure
                continue
            self.record_step(name, result=result, started=started)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def claim(self, server_uuid: str) -> None:
        """Claim the VM's capacity on ``server_uuid`` (both streams, one transaction). Raises
        ``InsufficientCapacityError``, ``ServerNotFoundError`` or ``JobNotRunnableError``."""
        def claim(vm: Vm) -> None:
            self._held(vm)
            vm.claim_capacity(server_uuid, cause=self.cause)

        self._change(claim)

    def _held(self, vm: Vm) -> None:
        head = vm.head_job
        if head is None or head["uuid"] != self.job_uuid or head["worker"] != self.worker.worker_id:
            raise JobNotRunnableError(self.job_uuid, "no longer held by this worker")

    def record_step(self, name: str, *, result: Any, error: str | None = None,
                    started: datetime | None = None) -> None:
        """Record a step that needed no compute call (or whose outcome is known)."""
        step = {
            "name": name,
            "result": result,
            "error": error,
            "started_at": rfc3339(started or utcnow()),
            "finished_at": rfc3339(utcnow()),
        }
        self._change(lambda vm: vm.record_step(
            self.job_uuid, step, cause=self.cause, worker=self.worker.worker_id))
        self.steps_recorded += 1
        self.last_step_failed = error is not None

    def succeed(self, record: Callable[[Vm], None] | None = None, *, note: str = "done") -> None:
        """Record the outcome (``record`` adds lifecycle events) and end the job well."""
        if not self.steps_recorded:
            self.record_step(self.job["name"], result=note)

        def finish(vm: Vm) -> None:
            if record:
                record(vm)
            vm.succeed_job(self.job_uuid, cause=self.cause, worker=self.worker.worker_id)

        self._change(finish)
        self.outcome = "succeeded"

    def fail(self, error: str, record: Callable[[Vm], None] | None = None) -> None:
        """Record the outcome and end the job failed with ``error``."""
        # VMAPI clients judge a job by its last chain result alone: a failure that came
        # after a step that went well must still end the chain with an error.
        if not self.last_step_failed:
            self.record_step(self.job["name"], result=None, error=error)

        def finish(vm: Vm) -> None:
            if record:
                record(vm)
            vm.fail_job(self.job_uuid, error, cause=self.cause, worker=self.worker.worker_id)

        self._change(finish)
        self.outcome = "failed"


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
    ):
        self.commands = commands
        self.driver = driver
        self.find_work = find_work
        self.placement = placement
        self.lease = timedelta(seconds=lease_s)
        self.worker_id = worker_id or f"worker-{uuidlib.uuid4().hex[:8]}"
        self.clock = clock
        self.paused = paused
        self.step_attempts = step_attempts
        self.max_attempts = max_attempts
        self.periodic = periodic  # the stuck-VM check, every ``periodic_s`` seconds
        self.periodic_s = periodic_s
        self._periodic_at = 0.0
        self._wake = threading.Event()

    def run_vm(self, vm_uuid: str) -> bool:
        """Claim and run the VM's head job if it is free; True if a job ran. Its log lines
        carry the VM, the job and this worker as the actor (service/logs.py)."""
        vm = self.commands.load(vm_uuid)
        head = vm.head_job
        if head is None:
            return False
        now = self.clock()
        if head["execution"] == "running" and datetime.fromisoformat(head["lease_expires_at"]) > now:
            return False
        actor = f"worker:{self.worker_id}"
        with log_context(actor=actor, vm_uuid=vm_uuid, job_uuid=head["uuid"]):
            return self._claim_and_run(vm_uuid, head["uuid"], now,
                                       make_cause(actor, job_uuid=head["uuid"]))

    def _claim_and_run(self, vm_uuid: str, job_uuid: str, now: datetime, cause: Cause) -> bool:
        from service import jobs  # the handlers use JobRun, defined above

        try:
            _, vm, _ = self.commands.change(vm_uuid, lambda v: v.start_job(
                job_uuid, worker=self.worker_id, now=now, lease_expires_at=now + self.lease,
                cause=cause))
        except JobNotRunnableError:
            return False
        run = JobRun(self, vm, vm.head_job)
        fields = {"job_name": run.job["name"], "attempt": run.attempt, "worker": self.worker_id}
        if run.attempt > 1:
            # Started before and still running, but its lease had expired (``start_job``
            # refuses otherwise): the worker that held it was lost, and this one took it over.
            metrics.LEASE_TAKEOVERS.inc()
        log.info("job %s started (attempt %d%s)", run.job["name"], run.attempt,
                 ", taken over after its lease expired" if run.attempt > 1 else "",
                 extra=fields)
        run.keep_lease()
        try:
            if run.attempt > self.max_attempts:
                jobs.give_up(run)
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
            run.release()
            if run.outcome in ("succeeded", "failed"):
                log.info("job %s %s", run.job["name"], run.outcome,
                         extra={**fields, "outcome": run.outcome})
            elif run.outcome is None:
                log.warning("job %s left unfinished: another worker takes it over once its "
                            "lease expires", run.job["name"],
                            extra={**fields, "outcome": "unfinished"})
        return True

    def run_pending(self) -> int:
        """One pass over the VMs with unfinished jobs; how many jobs ran (none while paused)."""
        if self.paused():
            return 0
        ran = 0
        for vm_uuid in self.find_work():
            while self.run_vm(vm_uuid):
                ran += 1
        return ran

    def _run_periodic(self) -> None:
        now = time.monotonic()
        if self.periodic is not None and not self.paused() and now - self._periodic_at >= self.periodic_s:
            self._periodic_at = now
            self.periodic()

    def wake(self) -> None:
        """Look for work now rather than at the next poll."""
        self._wake.set()

    def run_forever(self, stop: threading.Event, poll_s: float) -> None:
        """Run pending jobs until ``stop`` is set, waiting ``poll_s`` (or a wake-up) between."""
        while not stop.is_set():
            self._wake.clear()
            try:
                self._run_periodic()
                self.run_pending()
            except Exception:  # noqa: BLE001 - a worker must outlive one bad pass
                log.exception("worker pass failed")
                stop.wait(poll_s)
            self._wake.wait(poll_s)
