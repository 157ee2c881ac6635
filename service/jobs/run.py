"""One claimed job as its worker works on it (``JobRun``): its steps, its lease and its outcome,
recorded as the worker that holds it (service/jobs/worker.py claims jobs and builds the run's
``JobContext``; service/jobs/handlers.py says what each job does).

Each finished step is recorded before the next begins, and every save re-checks that this
worker still holds the job.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from domain.errors import JobNotRunnableError
from domain.job_queue import ActiveJob
from domain.vm import Vm, make_cause
from projections.formats import rfc3339
from service.commands.application import Commands
from service.database_failures import database_failure
from service.db_retry import retry_transient
from service.jobs.compute.driver import (
    ComputeDriver,
    ComputeError,
    Fence,
    Incarnation,
    OutcomeUnknownError,
    UnknownServerError,
)
from service.jobs.fencing import FencedDriver
from service.jobs.transient import PatientDriver
from service.logs import Throttled

log = logging.getLogger(f"vmledger.{__name__}")

# The servers to try, best first (the claim on each server's stream decides).
Placement = Callable[[Vm], list[str]]

R = TypeVar("R")


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


class StepFailedError(Exception):
    """A job step failed; the job ends failed with this message."""

    # whether the node may have done the step's work all the same (OutcomeUnknownError)
    outcome_unknown = False


class OutcomeUnknownStepError(StepFailedError):
    """Every attempt of a step failed, and one of them may have done its work on the node
    (its answer was lost: ``OutcomeUnknownError``), or the job follows an attempt that waited
    to ask the node what such a step did. The job asks the node before it records the step
    as not done (service/jobs/lost_answers.py ``settle_unknown``; docs/jobs.md, "An answer
    lost on the last attempt")."""

    outcome_unknown = True


class PreconditionFailedError(StepFailedError):
    """The VM changed under the job (another writer moved it on): the next step is not run."""


@dataclass(frozen=True)
class JobContext:
    """What a job run needs of the worker that claimed it (the worker builds one per run;
    a run never reaches back into its worker). ``lease`` is the lease's length."""

    commands: Commands
    driver: ComputeDriver
    placement: Placement
    worker_id: str
    lease: timedelta
    clock: Callable[[], datetime]
    step_attempts: int
    # Where a lease renewal that a database outage failed is logged: the worker's one
    # ``lease_failures()`` (one line per 10 s per process); None, the run's own.
    lease_failed: Callable[[str], None] | None = None


def lease_failures() -> Throttled:
    """How a lease renewal that failed on a database outage (``database_failure``) is logged:
    one WARNING line, the database's own words without a traceback, then at most one every
    10 s counting those left out, as the worker's failed passes (docs/operations.md,
    "Logs"). Operator tester: each renewal of an outage logged an ERROR with a ~60-line
    ``PoolTimeout`` traceback."""
    return Throttled(log, "renewing a job's lease failed", level=logging.WARNING)


class JobRun:
    """One claimed job being worked on: records steps and the outcome as this worker, keeps
    its lease alive, and runs no step whose preconditions no longer hold (Omicron #2209).

    ``vm`` is the VM as this worker's claim (its ``JobStarted``) left it: its version is the
    epoch of the job's ``fence``, which every compute call of the run carries, so that a
    worker that resumes after its job was taken over changes nothing on a node."""

    def __init__(self, context: JobContext, vm: Vm, job: ActiveJob):
        self.context = context
        self.vm = vm
        self.job = job
        self.job_uuid: str = job["uuid"]
        self.params: dict[str, Any] = job["params"]
        self.attempt: int = job["attempt"]
        self.steps_recorded = 0
        self.last_step_failed = False
        self.cause = make_cause(f"worker:{context.worker_id}", job_uuid=self.job_uuid)
        # What the steps assume of the VM: where it was, as it was, when the job was claimed.
        self.expected = (str(vm.state), vm.server_uuid)
        self._lost: JobNotRunnableError | None = None
        # How the job ended here: succeeded, failed, lost (taken over), waiting (a takeover
        # left it to the next: service/jobs/takeovers.py), None while running.
        self.outcome: str | None = None
        self.error: str | None = None  # the job's error, once it failed
        # A provision that fails: the servers a copy may still be on, which the handler that
        # cleaned up could not rule out (none: every server answered it has none); None
        # until a handler says, then every server a copy may be on is counted
        # (Lifecycle.record_provision_failed keeps the NICs while a copy may hold them).
        self.copies_left: list[str] | None = None
        self._done = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._lease_failed = context.lease_failed or lease_failures()
        # When the lease was last known held (claimed or renewed), on the monotonic clock:
        # transient database errors are retried until a third of a lease before it ends.
        self._held_since = time.monotonic()
        # Whether the node may have done a step's work that no answer told of before this
        # run: from an attempt that ended waiting to ask the node what its step did
        # (lost_answers.settle_unknown) until the node answers, kept in the job's state
        # (``ActiveJob.outcome_unknown``), so across attempts whose workers were lost too
        # (a provision's wait is its takeover's, which asks the node anyway).
        self.outcome_unknown = bool(job.get("outcome_unknown", job.get("after_a_wait"))) \
            and job["name"] != "provision"
        self.fence = Fence(self.job_uuid, vm.version)
        self._driver = PatientDriver(FencedDriver(context.driver, self.fence), self.retry_until)

    @property
    def driver(self) -> ComputeDriver:
        """The worker's compute driver: every operation on the VM carries the run's fence (a
        refusal raises ``JobNotRunnableError``: service/jobs/fencing.py), and every call is
        retried through transient database errors while the lease holds
        (service/jobs/transient.py)."""
        return self._driver  # type: ignore[return-value]

    def retry_until(self) -> float:
        """The monotonic time until which a transient database error is retried: two thirds
        of a lease after the lease was last known held."""
        return self._held_since + self.context.lease.total_seconds() * 2 / 3

    def patiently(self, call: Callable[[], R], what: str = "a database call") -> R:
        """``call()``, retried through transient database errors while the lease holds."""
        return retry_transient(call, until=self.retry_until, what=what)

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
        lease = self.context.lease
        while not self._done.wait(lease.total_seconds() / 3):
            expires = self.context.clock() + lease
            try:
                self.context.commands.change(
                    Vm, self.vm.id, lambda vm, expires=expires: vm.renew_lease(
                        self.job_uuid, worker=self.context.worker_id,
                        lease_expires_at=expires, cause=self.cause))
                self._held_since = time.monotonic()
            except JobNotRunnableError as lost:
                self._lost = lost
                return
            except Exception as error:  # keep trying: the lease is not lost yet
                outage = database_failure(error)
                if outage is None:  # a bug: its traceback says where
                    log.exception("renewing the lease of job %s failed", self.job_uuid)
                else:
                    self._lease_failed(outage)

    # -- steps ------------------------------------------------------------------------------

    def _change(self, mutate: Callable[[Vm], None]) -> Vm:
        if self._lost is not None:
            raise self._lost

        def held_then_mutate(vm: Vm) -> None:
            # The ticket first: a job the quarantine canceled (or a takeover took) records
            # nothing, and is told so, rather than being refused by a VM it no longer owns.
            vm.require_held(self.job_uuid, self.context.worker_id)
            mutate(vm)

        _, vm, _, _ = self.patiently(
            lambda: self.context.commands.change(Vm, self.vm.id, held_then_mutate),
            "recording the job")
        self.vm = vm
        return vm

    def _check_preconditions(self, name: str) -> None:
        found = (str(self.vm.state), self.vm.server_uuid)
        if found != self.expected:
            error = (f"not run: the VM changed while the job ran (state {self.expected[0]} on "
                     f"{self.expected[1]}, now {found[0]} on {found[1]})")
            self.record_step(name, result=None, error=error)
            raise PreconditionFailedError(error)

    def step(self, name: str, operation: Callable[[], Any], *,
             whatever_the_state: bool = False) -> Any:
        """Run ``operation`` as step ``name`` and record it (a ``chain_results`` entry); a
        failed call is recorded and tried again, ``context.step_attempts`` times in all.
        ``whatever_the_state``: run it even if the VM changed since the claim (a ``fence``
        job's step, which is right in any state: service/jobs/fence_job.py).

        Raises ``StepFailedError`` when every attempt failed (``PreconditionFailedError`` when
        the VM changed under the job, before anything was run; ``OutcomeUnknownStepError``
        when one of them may have done the work, its answer lost, or the run follows a wait
        to ask the node: ``outcome_unknown``), and ``JobNotRunnableError`` if the job was
        taken from this worker.
        """
        unknown = self.outcome_unknown
        for attempt in range(1, self.context.step_attempts + 1):
            if not whatever_the_state:
                self._check_preconditions(name)
            started = utcnow()
            try:
                result = self.patiently(operation, f"step {name}")
            except ComputeError as failure:
                error = str(failure) or type(failure).__name__
                self.record_step(name, result=None, error=error, started=started)
                unknown = unknown or isinstance(failure, OutcomeUnknownError)
                # a server the driver does not have stays unknown: asking again cannot help
                if attempt == self.context.step_attempts \
                        or isinstance(failure, UnknownServerError):
                    failed = OutcomeUnknownStepError if unknown else StepFailedError
                    raise failed(error) from failure
                continue
            if isinstance(result, Incarnation):
                self.record_step(name, result=result.as_result(), started=started,
                                 observed=result)
            else:
                self.record_step(name, result=result, started=started)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def claim(self, server_uuid: str) -> None:
        """Claim the VM's capacity on ``server_uuid`` (both streams, one transaction). Raises
        ``InsufficientCapacityError``, ``ServerNotFoundError`` or ``JobNotRunnableError``."""
        self._change(lambda vm: vm.claim_capacity(server_uuid, cause=self.cause))

    def release_claim(self, step: str) -> None:
        """Give back the capacity the VM holds (the claim a failed placement made), recorded
        as step ``step`` whose result is the server, in the same save as the release."""
        server_uuid = (self.vm.claim or {}).get("server_uuid")
        entry = _entry(step, server_uuid, None, utcnow())

        def release(vm: Vm) -> None:
            vm.record_step(self.job_uuid, entry, cause=self.cause, worker=self.context.worker_id)
            vm.release_capacity(cause=self.cause)

        self._change(release)
        self.steps_recorded += 1
        self.last_step_failed = False

    def record_step(self, name: str, *, result: Any, error: str | None = None,
                    started: datetime | None = None,
                    observed: Incarnation | None = None) -> None:
        """Record a step that needed no compute call (or whose outcome is known). ``observed``:
        the node's answer the step took, whose sequence number is recorded with it, in the
        same save (``Vm.NodeObserved``): a report the node took before it is then older than
        what the log records (docs/jobs.md, "Reports older than a job's step")."""
        step = _entry(name, result, error, started or utcnow())

        def record(vm: Vm) -> None:
            vm.record_step(self.job_uuid, step, cause=self.cause, worker=self.context.worker_id)
            if observed is not None and observed.seq is not None \
                    and observed.server_uuid is not None:
                vm.record_node_seen(observed.server_uuid, observed.seq, cause=self.cause)

        self._change(record)
        self.steps_recorded += 1
        self.last_step_failed = error is not None

    def succeed(self, record: Callable[[Vm], None] | None = None, *, note: str = "done") -> None:
        """Record the outcome (``record`` adds lifecycle events) and end the job well."""
        if not self.steps_recorded:
            self.record_step(self.job["name"], result=note)

        def finish(vm: Vm) -> None:
            if record:
                record(vm)
            vm.succeed_job(self.job_uuid, cause=self.cause, worker=self.context.worker_id)

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
            vm.fail_job(self.job_uuid, error, cause=self.cause, worker=self.context.worker_id)

        self._change(finish)
        self.outcome = "failed"
        self.error = error


def _entry(name: str, result: Any, error: str | None, started: datetime) -> dict[str, Any]:
    """A ``chain_results`` entry, finished now."""
    return {"name": name, "result": result, "error": error,
            "started_at": rfc3339(started), "finished_at": rfc3339(utcnow())}
