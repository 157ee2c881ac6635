"""Waiting for a job: WaitJob's wait (``wait_for_job``), and the answer of a command sent with
``sync=true`` (``answer_command``), given once its job ended or at the wait's bound."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
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
from service.logs import bind

log = logging.getLogger(f"vmledger.{__name__}")

SYNC_TIMEOUT_S = 60.0  # the longest a sync command waits for its job (s; api.md)
ENDED_BADLY = ("failed", "canceled")  # a sync wait's job that ended so is refused (409)


async def answer_command(request: Request, result: Accepted, *, sync: bool) -> JSONResponse:
    """The answer to an accepted command (``deps.accepted``). With ``sync``, given once the
    job ended (at most ``SYNC_TIMEOUT_S``; then as it is) with the VM's version at that time
    as ``ETag``: its ETag is the VM's version when it answers (api.md); the version at
    acceptance would already be stale, and an ``If-Match`` taken from it refused. Raises
    ``JobEndedBadlyError`` (409) when the waited job failed or was canceled, as VMAPI's
    ``handleUpdateVMResponse`` answers ``waitForJob``'s error, not 202. A read of the wait
    that fails ends it (``_waited``): never a read's 503 or a 500 for a command recorded."""
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
    whatever its wait reads: one of them failing (the database down, ``job_view`` refused to
    the service's role, a bug) ends the wait with the job as last read (None) and ``result``
    as accepted, and is logged once (``_log_cut_short``). A 503 here made a client retrying
    without a key create a second VM (api.md, "Commands and the projector"; a tester)."""
    services = services_of(request)
    job = None
    try:
        job = await wait_for_job(services, result.job_uuid, SYNC_TIMEOUT_S)
        now = await run_in_threadpool(services.commands.load, result.vm_uuid)
    except Exception as error:  # noqa: BLE001 - any failure: the answer is the command's
        _log_cut_short(request, result, error)
        return job, result
    return job, replace(result, version=now.version)


def _log_cut_short(request: Request, result: Accepted, error: Exception) -> None:
    """One line for a sync wait ended by ``error``: a WARNING naming it for a database's
    failure (as its 503 would: a table missing or refused to the role, the database down),
    an ERROR with the traceback for anything else, which is a bug."""
    what = f"sync wait for job {result.job_uuid} of VM {result.vm_uuid} ended early"
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
