"""The console's VM and audit fragments: one VM's timeline, its object at any version or
instant and the diff between two versions (folded from its stream, as ``GET
/vms/{uuid}?version=`` and ``?at=`` do), its jobs and volume mounts; and audit verify, run
from the page for one VM or for the fleet a page at a time (``service/audit/streams.py``)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse

from domain.errors import VmNotFoundError
from projections.vm_view import render_vm
from service.api.auth import authorized_router
from service.api.deps import read_your_writes, services_of
from service.api.params import Query
from service.api.query_parameters import (
    AS_IT_WAS, OWNERS_VM, UUID, Param, QueryParameters, integer,
)
# GetVm's own time travel, so the console shows exactly what ?version= and ?at= answer
from service.api.time_travel import as_it_was, owned_now, version_or_instant
from service.audit.history import hidden_from_its_owner, vm_history
from service.audit.streams import MAX_PAGE, fleet_page, verify_vms
from service.console.render import differences, fragment

router = authorized_router(tags=["console"])

TIMELINE = 1000  # events shown on a VM's timeline (the newest are past it: say so)
JOBS = 100  # jobs listed on a VM's page, the newest (the page says how many it has)
AUDIT_PAGE = 50

VM_PAGE = QueryParameters(OWNERS_VM)
VM_STATE = QueryParameters(*AS_IT_WAS, OWNERS_VM)
VM_DIFF = QueryParameters(
    Param("from", "the version compared from", integer(1), required=True),
    Param("to", "the version compared to", integer(1), required=True),
    OWNERS_VM)
AUDIT_FORM = QueryParameters(Param("vm_uuid", "the VM the form is filled in for", UUID),
                             scoped=False)
AUDIT_RUN = QueryParameters(
    Param("vm_uuid", "verify this VM only (not with after or limit)", UUID),
    Param("after", "the fleet's VMs created after this log position (default 0)", integer(0)),
    Param("limit", f"this many VMs (default {AUDIT_PAGE}, at most {MAX_PAGE})",
          integer(1, MAX_PAGE)), scoped=False)


def _visible(request: Request, query: Query, vm_uuid: str) -> Any:
    """The VM aggregate now, if the caller may see it (an owner token: its own VMs only, by
    who owns it now, as GetVm's time travel scopes); raises ``VmNotFoundError``."""
    return owned_now(services_of(request), vm_uuid, query.owner_uuid)


def _visible_before(version: int, hidden: list[tuple[int, int]]) -> int:
    """The newest version before ``version`` outside the runs ``hidden`` (``version`` itself
    for version 1: nothing is before it). Version 1 (``Created``) is never hidden."""
    previous = max(version - 1, 1)
    for first, last in reversed(hidden):
        if first <= previous <= last:
            previous = first - 1
    return previous


@router.get("/console/fragments/vms/{vm_uuid}", response_class=HTMLResponse,
            openapi_extra=VM_PAGE)
def vm_page(vm_uuid: str, request: Request) -> HTMLResponse:
    """A VM: the object now, every event (up to ``TIMELINE``) with its cause, its jobs with
    their chain results, its volumes' mounts (stale or not), and the version slider."""
    query = VM_PAGE.parse(request)
    query.check()
    services = services_of(request)
    current = _visible(request, query, vm_uuid)
    head = services.commands.head_position()  # the page shows at least this: changes after
    read_your_writes(request, services, ("vm_view", "volume_mounts", "job_view"),
                     eventual=query.eventual)
    vm = services.vms.get(str(current.id))
    events = vm_history(services.commands, str(current.id), limit=TIMELINE,
                        scope_owner=query.owner_uuid)
    # an owner may not see the versions of a quarantine (domain.visibility): the slider and
    # the diff's defaults offer only the others, found from the quarantines' versions alone
    # (folding the whole stream for them grew every view with the VM's reports)
    hidden = ([] if query.owner_uuid is None
              else hidden_from_its_owner(services.commands, str(current.id), current.version))
    jobs, jobs_total = services.jobs.newest_of_vm(str(current.id), JOBS)
    # an owner's timeline leaves out the quarantine's events, so count by the last version
    # shown, not by how many are shown
    last_shown = events[-1]["version"] if events else 0
    return fragment("vm.html", vm=vm or render_vm(current), events=events,
                    head=head,
                    version=current.version, truncated=current.version > last_shown, jobs=jobs,
                    jobs_total=jobs_total, hidden=hidden, first=1,
                    previous=_visible_before(current.version, hidden))


@router.get("/console/fragments/vms/{vm_uuid}/state", response_class=HTMLResponse,
            openapi_extra=VM_STATE)
def vm_state(vm_uuid: str, request: Request) -> HTMLResponse:
    """The VM object as it was at ``version`` or at instant ``at`` (RFC 3339), folded from
    its stream; without either, as it is now."""
    query = VM_STATE.parse(request)
    version, at = version_or_instant(query)
    services = services_of(request)
    current = _visible(request, query, vm_uuid)
    vm = (as_it_was(services, str(current.id), version, at, owner_uuid=query.owner_uuid,
                    current=current)
          if version is not None or at is not None else render_vm(current))
    return fragment("vm_state.html", vm=vm, newest=current.version)


@router.get("/console/fragments/vms/{vm_uuid}/diff", response_class=HTMLResponse,
            openapi_extra=VM_DIFF)
def vm_diff(vm_uuid: str, request: Request) -> HTMLResponse:
    """What changed in the VM object from version ``from`` to version ``to`` (both folded
    from its stream)."""
    query = VM_DIFF.parse(request)
    versions = [query.integer(name, minimum=1) for name in ("from", "to")]
    for name, value in zip(("from", "to"), versions, strict=True):
        if value is None and name not in query.params:
            query.invalid(name, "Missing parameter", code="Missing")
    query.check()
    services = services_of(request)
    current = _visible(request, query, vm_uuid)
    old, new = versions
    assert old is not None and new is not None
    before = as_it_was(services, str(current.id), old, None, owner_uuid=query.owner_uuid,
                       current=current)
    after = as_it_was(services, str(current.id), new, None, owner_uuid=query.owner_uuid,
                      current=current)
    return fragment("vm_diff.html", old=old, new=new, changes=differences(before, after))


@router.get("/console/fragments/audit", response_class=HTMLResponse, openapi_extra=AUDIT_FORM)
def audit_form(request: Request) -> HTMLResponse:
    """The audit page: run verify for one VM, or for the fleet a page of VMs at a time."""
    query = AUDIT_FORM.parse(request)
    vm_uuid = query.uuid("vm_uuid")
    query.check()
    return fragment("audit.html", vm_uuid=vm_uuid, page=AUDIT_PAGE, max_page=MAX_PAGE)


@router.post("/console/fragments/audit", response_class=HTMLResponse, openapi_extra=AUDIT_RUN)
def audit_run(request: Request) -> HTMLResponse:
    """Run verify: ``vm_uuid`` for one VM; otherwise the fleet's next ``limit`` VMs
    (``AUDIT_PAGE`` by default, at most ``MAX_PAGE``) created after log position ``after``.
    Raises ``VmNotFoundError`` (404) for a ``vm_uuid`` neither the log nor a read model
    holds (the roles that audit see every VM, so no owner scoping applies). ``vm_uuid`` with
    ``after`` or ``limit`` is ``ConflictingParameters`` naming the paging parameter (``after``
    first): one VM is not paged, and the paging was silently ignored (console tester)."""
    query = AUDIT_RUN.parse(request)
    vm_uuid = query.uuid("vm_uuid")
    after = query.integer("after", minimum=0) or 0
    limit = query.integer("limit", minimum=1, maximum=MAX_PAGE) or AUDIT_PAGE
    query.check()
    paging = [name for name in ("after", "limit") if name in query.params]
    if vm_uuid is not None and paging:
        raise query.conflicting("vm_uuid", paging[0], refused=paging[0])
    services = services_of(request)
    if vm_uuid is not None:
        audits, next_after = verify_vms(services, [vm_uuid]), None
        if audits[0].events == 0 and not audits[0].read_models:
            # Neither a stream nor a read-model row holds it: unknown, as GetVm answers it.
            # (Rows that outlived their stream are a finding, shown as such.)
            raise VmNotFoundError(vm_uuid)
    else:
        audits, next_after = fleet_page(services, after=after, limit=limit)
    return fragment("audit_result.html", audits=audits, one=vm_uuid is not None,
                    after=after, limit=limit, next_after=next_after,
                    failed=sum(not a.ok for a in audits))
