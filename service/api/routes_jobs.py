"""Job routes: a VM's jobs, ListJobs, GetJob and WaitJob."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from domain.errors import JobNotFoundError, VmNotFoundError
from domain.states import Execution, JobName
from service.api import job_waits
from service.api.auth import authorized_router
from service.api.deps import read_your_writes, services_of
from service.api.params import Query
from service.api.query_parameters import (
    LIMIT,
    OFFSET,
    UUID,
    Param,
    QueryParameters,
    integer,
    one_of,
    owner,
)
from service.container import Services

router = authorized_router()

MAX_WAIT_S = 120

#: VMAPI's job tasks (sdc-vmapi lib/apis/wfapi.js: each job's ``params.task``) as vmledger's
#: jobs: the job's name and whether it is forced (``JobQueries.list``'s ``forced``: a kill is
#: a stop job with ``args.force``, docs/jobs.md), or None for a task vmledger queues no job
#: for (listed as none). vmledger's own names are tasks too (``fence``).
VMAPI_TASKS: dict[str, tuple[str, bool | None] | None] = {
    **{name.value: (name.value, None) for name in JobName},
    "stop": (JobName.STOP.value, False), "kill": (JobName.STOP.value, True),
    **dict.fromkeys(("reprovision", "update_nics", "snapshot", "migrate-begin", "migrate-sync",
                     "migrate-switch", "migrate-abort", "migrate-pause", "migrate-rollback")),
}

_JOB_FILTERS = (
    Param("execution", "only jobs in this execution state", one_of(e.value for e in Execution)),
    Param("name", "only jobs of this name (not with task)", one_of(n.value for n in JobName)),
    Param("task", "VMAPI's name of a job (not with name): a name, or kill (the stop jobs a "
          "kill queued; stop is then the others), or one of VMAPI's tasks vmledger queues no "
          "job for (none listed)", one_of(VMAPI_TASKS)),
    LIMIT, OFFSET)
VM_JOBS = QueryParameters(*_JOB_FILTERS, owner("another owner's VM is not found"))
LIST_JOBS = QueryParameters(Param("vm_uuid", "only this VM's jobs", UUID), *_JOB_FILTERS,
                            owner("only jobs of this owner's VMs"))
GET_JOB = QueryParameters(owner("a job of another owner's VM is not found"))
WAIT_JOB = QueryParameters(
    Param("timeout", "answer at the latest after this many seconds (default 30)",
          integer(0, MAX_WAIT_S)),
    owner("a job of another owner's VM is not found"))


@router.get("/vms/{vm_uuid}/jobs", openapi_extra=VM_JOBS)
def list_vm_jobs(vm_uuid: str, request: Request) -> JSONResponse:
    """The VM's jobs, newest first by log position (``JobQueries.list``)."""
    services = services_of(request)
    query = VM_JOBS.parse(request)
    limit = query.integer("limit", minimum=1, maximum=1000) or 1000
    offset = query.integer("offset", minimum=0) or 0
    filters = _job_filters(query)
    read_your_writes(request, services, ("vm_view", "job_view"), eventual=query.eventual)
    vm = services.vms.get(vm_uuid.lower())
    owner_uuid = query.owner_uuid
    if vm is None or (owner_uuid is not None and vm["owner_uuid"] != owner_uuid):
        raise VmNotFoundError(vm_uuid)
    return JSONResponse([] if filters is None else services.jobs.list(
        vm_uuid=vm_uuid.lower(), **filters, limit=limit, offset=offset))


@router.get("/jobs", openapi_extra=LIST_JOBS)
def list_jobs(request: Request) -> JSONResponse:
    """ListJobs: filter by ``vm_uuid``, ``execution`` and ``name``; newest first by log
    position, not ``created_at`` (``JobQueries.list``)."""
    services = services_of(request)
    query = LIST_JOBS.parse(request)
    vm_uuid = query.uuid("vm_uuid")
    owner_uuid = query.owner_uuid
    limit = query.integer("limit", minimum=1, maximum=1000) or 1000
    offset = query.integer("offset", minimum=0) or 0
    filters = _job_filters(query)
    read_your_writes(request, services, ("vm_view", "job_view"), eventual=query.eventual)
    return JSONResponse([] if filters is None else services.jobs.list(
        vm_uuid=vm_uuid, **filters, owner_uuid=owner_uuid, limit=limit, offset=offset))


def _job_filters(query: Query) -> dict[str, Any] | None:
    """``JobQueries.list``'s ``execution``, ``name`` and ``forced``, from ``execution`` and
    ``name``, or ``task`` (VMAPI's word: ``VMAPI_TASKS``); None for a task vmledger queues
    no job for, which lists none. A bad one is refused naming the parameter it came in
    (VMAPI passes ``task`` to its Workflow API unchecked; vmledger takes the tasks VMAPI
    queues and refuses the rest, docs/vmapi-compatibility.md), ``execution`` one of the five
    Workflow's ``GET /jobs`` takes; ``task`` with ``name`` is refused as conflicting (the
    one would silently win over the other, as version over at would). Raises the refusal of
    any bad parameter of ``query``, so both job lists answer alike."""
    execution = query.params.get("execution")
    if execution is not None and execution not in {e.value for e in Execution}:
        query.invalid("execution", "must be one of " + ", ".join(e.value for e in Execution))
    # An empty value is refused as any other that names no job, as ``execution=`` is: it
    # was read as no filter, so ``task=&name=stop`` listed the stop jobs (a tester).
    for given, known in (("name", [n.value for n in JobName]), ("task", list(VMAPI_TASKS))):
        value = query.params.get(given)
        if value is not None and value not in known:
            query.invalid(given, "must be one of " + ", ".join(known))
    query.check()
    if "task" in query.params and "name" in query.params:
        raise query.conflicting("task", "name", refused="task")
    if "task" not in query.params:
        return {"execution": execution, "name": query.params.get("name")}
    job = VMAPI_TASKS[query.params["task"]]
    return None if job is None else {"execution": execution, "name": job[0], "forced": job[1]}


@router.get("/jobs/{job_uuid}", openapi_extra=GET_JOB)
def get_job(job_uuid: str, request: Request) -> JSONResponse:
    """GetJob."""
    services = services_of(request)
    query = GET_JOB.parse(request)
    query.check()
    # vm_view too: an owner's visibility is its VM's owner there (_visible)
    read_your_writes(request, services, ("vm_view", "job_view"), eventual=query.eventual)
    job = services.jobs.get(job_uuid.lower())
    if job is None or not _visible(services, job, query.owner_uuid):
        raise JobNotFoundError(job_uuid)
    return JSONResponse(job)


def _visible(services: Services, job: dict[str, Any], owner_uuid: str | None) -> bool:
    """Whether a job is visible to a request scoped to ``owner_uuid`` (its VM's owner now)."""
    if owner_uuid is None:
        return True
    vm = services.vms.get(job["vm_uuid"])
    return vm is not None and vm["owner_uuid"] == owner_uuid


@router.get("/jobs/{job_uuid}/wait", openapi_extra=WAIT_JOB)
async def wait_job(job_uuid: str, request: Request) -> JSONResponse:
    """WaitJob: answers once the job is terminal, or at ``timeout`` seconds (default 30),
    reading again through failures that pass until then; async, so a waiting client holds no
    thread of the pool (``job_waits.wait_job``)."""
    services = services_of(request)
    query = WAIT_JOB.parse(request)
    timeout = query.integer("timeout", minimum=0, maximum=MAX_WAIT_S)
    query.check()
    job = await job_waits.wait_job(
        request, job_uuid.lower(), float(30 if timeout is None else timeout),
        lambda: _find_visible(request, services, job_uuid, query))
    if job is None:
        raise JobNotFoundError(job_uuid)
    return JSONResponse(job)


def _find_visible(request: Request, services: Services, job_uuid: str, query: Query) -> None:
    """Read-your-writes first, so a job just accepted is found even with ``timeout=0``
    (``vm_view`` too: an owner's visibility is its VM's owner there); raises
    ``JobNotFoundError`` for a job the caller may not see."""
    read_your_writes(request, services, ("vm_view", "job_view"), eventual=query.eventual)
    found = services.jobs.get(job_uuid.lower())
    if found is None or not _visible(services, found, query.owner_uuid):
        raise JobNotFoundError(job_uuid)