"""Waiting for a job: WaitJob's wait (``wait_job``), and the answer of a command sent with
``sync=true`` (``answer_command``), given once its job ended or at the wait's bound. Both read
``job_view`` in short checks (``wait_for_job``), and read again through failures that pass
(``_through_outages``) until their bound."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import psycopg
from fastapi import Request
from fastapi.responses import JSONResponse
from psycopg_pool import PoolClosed
from starlette.concurrency import run_in_threadpool

from domain.states import TERMINAL_EXECUTIONS
from service.api.deps import accepted, accepted_headers, services_of
from service.api.errors import (
    DRIVER_ERRORS,
    JobEndedBadlyError,
    database_setup_problem,
    row_for,
)
from service.commands.change import Accepted
from service.container import Services
from service.db_retry import TRANSIENT_ERRORS, pauses
from service.logs import bind

log = logging.getLogger(f"vmledger.{__name__}")

SYNC_TIMEOUT_S = 60.0  # the longest a sync command waits for its job (s; api.md)
ENDED_BADLY = ("failed", "canceled")  # a sync wait's job that ended so is refused (409)
R = TypeVar("R")


async def answer_command(request: Request, result: Accepted, *, sync: bool) -> JSONResponse:
    """The answer to an accepted command (``deps.accepted``). With ``sync``, given once the
    job ended (at most ``SYNC_TIMEOUT_S``; then as it is) with the VM's version at that time
    as ``ETag``: its ETag is the VM's version when it answers (api.md); the version at
    acceptance would already be stale, and an ``If-Match`` taken from it refused. Raises
    ``JobEndedBadlyError`` (409) when the waited job failed or was canceled, as VMAPI's
    ``handleUpdateVMResponse`` answers ``waitForJob``'s error, not 202. A read of the wait
    that fails is made again while the failure may pass, else ends the wait (``_waited``):
    never a read's 503 or a 500 for a command recorded."""
    if sync:
        job, result = await _waited(request, result)
        if job is not None and job["execution"] in ENDED_BADLY:
            bind(vm_uuid=result.vm_uuid, job_uuid=result.job_uuid)  # the closing log line
            raise JobEndedBadlyError(job, headers=accepted_headers(request, result))
    return accepted(request, result)


async def _waited(request: Request, result: Accepted
                  ) -> tuple[dict[str, Any] | None, Accepted]:
    """The command's job once it ended, or as it is at ``SYNC_TIMEOUT_S`` (None: not shown by
    ``job_view`` by then), and ``result`` at the VM's version now. The command is recorded
    whatever its wait reads. A read failing for a while (a cut connection, the database
    down: ``_passing``) is made again until the bound, the pool reconnecting meanwhile: a
    sync stop whose wait lost its connection once answered 202 for a job that then failed,
    the database back within a second (a tester). A read failing otherwise (``job_view``
    refused to the service's role, a bug), or still failing at the bound, ends the wait with
    the job as last read (None) and ``result`` as accepted; logged once (``_log_cut_short``).
    A 503 here made a client retrying without a key create a second VM (api.md, "Commands
    and the projector"; a tester)."""
    services = services_of(request)
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    outage = _Outage()
    job = None
    try:
        job = await _through_outages(request, deadline, outage, lambda: wait_for_job(
            services, result.job_uuid, max(0.0, deadline - time.monotonic())))
        now = await _through_outages(request, deadline, outage, lambda: run_in_threadpool(
            services.commands.load, result.vm_uuid))
    except Exception as error:  # noqa: BLE001 - any failure: the answer is the command's
        _log_cut_short(request, result, error, outage)
        return job, result
    if outage.failed_s:
        log.warning("sync wait for job %s of VM %s: its reads failed for %.1f s (%s); read "
                    "again until they passed", result.job_uuid, result.vm_uuid,
                    outage.failed_s, outage.first_error)
    return job, replace(result, version=now.version)


async def wait_job(request: Request, job_uuid: str, timeout_s: float,
                   find: Callable[[], object]) -> dict[str, Any] | None:
    """WaitJob's wait: ``find()`` (run in a thread: the route's read-your-writes and its check
    that the caller may see the job, raising ``JobNotFoundError``), then the job once
    terminal, or as it is ``timeout_s`` after the call (``wait_for_job``; None if
    ``job_view`` does not show it). Each read that fails for a while (a cut connection, the
    database out of reach, a pool with no connection to give: ``_passing``) is made again,
    as a sync command's wait's are, until ``timeout_s``: it used to answer its first failed
    read's 503, the database back a moment later. Raises any other failure at once (a
    closed pool, a database set up short, a bug), and one still failing at ``timeout_s``:
    the route answers either as it would have (api.md, "Reads")."""
    services = services_of(request)
    deadline = time.monotonic() + timeout_s
    outage = _Outage()
    try:
        await _through_outages(request, deadline, outage, lambda: run_in_threadpool(find))
        job = await _through_outages(request, deadline, outage, lambda: wait_for_job(
            services, job_uuid, max(0.0, deadline - time.monotonic())))
    except Exception as error:
        if outage.failed_s:  # the route's answer says the last error, not how long it lasted
            log.warning("WaitJob for job %s: its reads failed for %.1f s (%s), until %s "
                        "ended it", job_uuid, outage.failed_s, outage.first_error,
                        type(error).__name__)
        raise
    if outage.failed_s:
        log.warning("WaitJob for job %s: its reads failed for %.1f s (%s); read again until "
                    "they passed", job_uuid, outage.failed_s, outage.first_error)
    return job


# The pauses between a wait's reads that failed for a while (s; WaitJob's and a sync wait's):
# short, the pool reconnects within a second of a cut, and jittered (``db_retry.pauses``), so
# waits cut at once come back spread.
FIRST_RETRY_S = 0.1
LONGEST_RETRY_S = 0.5


class _Outage:
    """How a wait's reads failed for a while: the first error, and for how long (s)."""

    def __init__(self) -> None:
        self.first_error: Exception | None = None
        self.failed_s = 0.0


async def _through_outages(request: Request, deadline: float, outage: _Outage,
                           read: Callable[[], Awaitable[R]]) -> R:
    """``await read()``, made again after each failure that passes (``_passing``) until
    ``deadline`` (monotonic s), waiting ``FIRST_RETRY_S``, twice that, ... up to
    ``LONGEST_RETRY_S`` between tries (``db_retry.pauses``, ``retry_transient``'s schedule);
    how long they failed is added to ``outage``. Raises any other failure at once, and one
    that passes once the next pause would reach the deadline."""
    schedule = pauses(lambda: deadline, FIRST_RETRY_S, LONGEST_RETRY_S)
    while True:
        started = time.monotonic()
        try:
            return await read()
        except Exception as error:
            if not _passing(request, error):
                raise
            outage.first_error = outage.first_error or error
            outage.failed_s += time.monotonic() - started
            pause = next(schedule, None)
            if pause is None:
                raise
            await asyncio.sleep(pause)
            outage.failed_s += pause


def _passing(request: Request, error: Exception) -> bool:
    """Whether ``error`` may pass if its read is made again: a cut connection, a database
    out of reach, a pool with no connection to give (``PASSING_ERRORS``); not a database
    set up short of what the service needs (a table missing, refused to its role), nor a
    pool closed (the process stopping, whose shutdown would wait for the wait's bound),
    raised as it is or wrapped by the library."""
    return (isinstance(error, PASSING_ERRORS)
            and not isinstance(error, PoolClosed)
            and not isinstance(error.__cause__, PoolClosed)
            and database_setup_problem(request, error) is None)


# The library's transient errors (service.db_retry, which a job's worker retries through) and
# the driver's own, which a read may raise unwrapped: a cut connection's "consuming input
# failed: server closed the connection unexpectedly" (psycopg_pool's PoolTimeout is one).
PASSING_ERRORS: tuple[type[Exception], ...] = (
    *TRANSIENT_ERRORS, psycopg.OperationalError, psycopg.InterfaceError)


def _log_cut_short(request: Request, result: Accepted, error: Exception,
                   outage: _Outage) -> None:
    """One line for a sync wait ended by ``error``: a WARNING naming it for a database's
    failure (as its 503 would: a table missing or refused to the role, the database down
    for as long as ``outage`` says), an ERROR with the traceback for anything else, which is
    a bug."""
    what = f"sync wait for job {result.job_uuid} of VM {result.vm_uuid} ended early"
    if outage.failed_s:
        what += f" (its reads failed for {outage.failed_s:.1f} s)"
    setup = database_setup_problem(request, error)
    row = row_for(type(error))
    if setup is not None:
        log.warning("%s: %s; answered as accepted", what, setup[0])
    elif isinstance(error, DRIVER_ERRORS) or (row is not None and row.status == 503):
        log.warning("%s: %s; answered as accepted", what, error)
    else:
        log.error("%s; answered as accepted", what, exc_info=error)


async def wait_for_job(services: Services, job_uuid: str, timeout_s: float
                       ) -> dict[str, Any] | None:
    """The job once it is terminal, or as it is at ``timeout_s`` (from the call); None if
    ``job_view`` has not shown it by then. A job not shown yet is waited for as one not ended:
    ``job_view`` lags the log while the projector is slow, paused or stopped (a sync command
    answered 202 after a quarter of a second, its job still queued: a tester). Each check
    borrows a thread of the pool for ``JOB_CHECK_S`` at most, never the whole wait: clients
    waiting for their jobs (``sync=true``, WaitJob) cannot take every thread of the pool the
    read routes and ``/ping`` need, nor wait past their time for one. Raises what its reads
    raise."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = max(0.0, deadline - time.monotonic())
        job = await run_in_threadpool(_job_as_now, services, job_uuid, min(left, JOB_CHECK_S))
        if job is not None and job["execution"] in TERMINAL_EXECUTIONS:
            return job
        if time.monotonic() >= deadline:
            return job
        services.worker.wake()
        await asyncio.sleep(0.01)


# The longest one check of a waited job holds a thread of the pool (s).
JOB_CHECK_S = 0.25


def _job_as_now(services: Services, job_uuid: str, wait_s: float) -> dict[str, Any] | None:
    """The job as ``job_view`` has it once it reached the log's head, or after ``wait_s``."""
    services.projections.wait_for(services.commands.head_position(), ("job_view",),
                                  timeout=wait_s)
    return services.jobs.get(job_uuid)
