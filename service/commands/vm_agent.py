"""``PUT /vms/{uuid}`` as Triton's vm-agent sends it to VMAPI: the whole VM object, with no
generation (api.md ``PUT /vms/{uuid}``; domain/vm_reports.py).

- A VM the log never had is recorded as found (``Vm.Discovered``), even with no server
  (``server_uuid: null``): the agent knows it, so the log does too. Found running or stopped
  on a server the log has, it holds its RAM and CPUs there as a placed VM does
  (``CapacityClaimed``, in the same transaction), even past the server's capacity: a fact
  the host reports is recorded, not refused, and placement then sees the server as full as
  it is. A failed VM holds none (as a placed VM that fails gives its claim back).
- A known VM's report is ordered by the object's ``last_modified``: one not newer than the last
  applied changes nothing, so a stale write that arrives late cannot undo a newer one. A
  report with no ``last_modified`` is taken as of its arrival. A report of the VM's own
  server in a state the log models records its ``last_modified`` (``AgentReported``, in
  the same save as what it changed, alone if it agreed with the log or a running job
  decides): it orders that server's later reports. Any other (about another server, with
  no server, in a state nothing is recorded of) appends nothing, so it cannot make the VM's
  own server's later reports "not newer". A report that carries the node's
  sequence number (``seq``, not vm-agent's own field) not newer than the one a job step
  recorded of the VM there was taken before that step, and changes nothing either
  (domain/vm_reports.py); without one it is ordered by its ``last_modified`` alone.
- A destroyed VM is never brought back, and a report from a server other than the VM's
  changes nothing (the log places VMs); otherwise the observed state is reconciled as every
  agent report is (``Agents._react``: a guest shutdown, a crash, a start out of band).

Every change goes through the commands' change loop (``Commands.change``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from domain.errors import ServerNotFoundError, VmNotFoundError
from domain.server import Server
from domain.states import VmState
from domain.vm import Cause, Vm
from service.commands.agents import OBSERVED_STATES, Admit, Agents, older_than_recorded
from service.commands.change import Changed, IfMatch, check_version

UNKNOWN_OWNER = str(UUID(int=0))  # a VM found with no owner_uuid in its report
_HOLDING = ("running", "stopped")  # the states a VM found on a server holds capacity in


@dataclass(frozen=True)
class AgentVm:
    """The fields of a vm-agent VM object vmledger records (the rest it does not model)."""

    state: str
    server_uuid: str | None
    last_modified: datetime | None = None
    seq: int | None = None  # the node's sequence number the report is as of, if it has one
    owner_uuid: str | None = None
    alias: str | None = None
    brand: str | None = None
    ram: int | None = None
    cpu_cap: int | None = None
    image_uuid: str | None = None
    customer_metadata: dict[str, Any] = field(default_factory=dict)
    internal_metadata: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)


class AgentVmReports:
    """Applies generation-less ``PUT /vms/{uuid}`` reports."""

    def __init__(self, agents: Agents):
        self.agents = agents
        self.commands = agents.commands

    def put(self, vm_uuid: str, report: AgentVm, *, cause: Cause,
            admit: Admit | None = None, if_match: IfMatch = None) -> Changed[None]:
        """Record the VM as its agent reports it (module docstring), in one pass of the
        change loop: a VM the log does not have is made (``new``), one it has is reconciled,
        once ``admit`` (``service.commands.agents.Admit``) has seen it and ``if_match`` (its
        version, checked after ``admit``: a 412 would tell a VM the agent may not name from
        one the log never had) matched. Returns what the change did: the VM as the report
        left it (``aggregate``: saved or, if it changed nothing, loaded) and the log
        position (None: nothing appended). Raises ``VmNotFoundError`` for an unknown VM
        reported in a state nothing is recorded of (``destroyed``, ``provisioning``) or with
        ``if_match`` (a version of a VM the log has: as every command's, a VM that does not
        exist is 404 first), ``VersionMismatchError``, and what ``admit`` raises."""
        try:
            vm_id = UUID(vm_uuid)
        except ValueError:
            raise VmNotFoundError(vm_uuid) from None
        reported_at = report.last_modified or datetime.now(UTC)

        def decide(vm: Vm) -> None:
            if vm.pending_events:  # found now: recorded as found
                return
            if admit is not None:
                admit(vm)
            check_version(vm, if_match, Vm)
            if VmState(vm.state) is VmState.DESTROYED or vm.is_stale_report(reported_at):
                return
            if report.server_uuid is not None and \
                    vm.is_older_than_recorded(report.server_uuid, report.seq):
                older_than_recorded(vm_uuid, report.server_uuid, f"its seq {report.seq}")
                return
            observed = vm.server_uuid == report.server_uuid and report.state in OBSERVED_STATES
            if observed:
                self.agents._react(vm, report.state, cause)  # noqa: SLF001 - the same rules
            vm.record_report(reported_at, cause=cause, observed=observed)

        try:
            self.commands.load(vm_id)
        except VmNotFoundError:  # made as found; a twin report that made it first wins
            if if_match is not None:
                raise
            holds = report.state in _HOLDING and self._known_server(report.server_uuid)
            return self.commands.change(
                Vm, vm_id, decide, new=lambda: self._found(vm_id, report, cause, holds=holds))
        return self.commands.change(Vm, vm_id, decide)

    def _known_server(self, server_uuid: str | None) -> bool:
        """Whether ``server_uuid`` is a server the log has (an operator may report a VM on
        any server, one never registered too: the VM is recorded there, holding nothing)."""
        if server_uuid is None:
            return False
        try:
            self.commands.load_aggregate(Server, server_uuid)
        except ServerNotFoundError:
            return False
        return True

    @staticmethod
    def _found(vm_id: UUID, report: AgentVm, cause: Cause, *, holds: bool) -> Vm:
        """The VM as found; with ``holds``, holding its capacity on its server."""
        if report.state not in OBSERVED_STATES:
            raise VmNotFoundError(vm_id)
        vm = Vm.discover(
            vm_uuid=vm_id, state=report.state, server_uuid=report.server_uuid,
            owner_uuid=report.owner_uuid or UNKNOWN_OWNER, brand=report.brand or "joyent",
            ram=report.ram or 0, cause=cause, reported_at=report.last_modified,
            alias=report.alias, cpu_cap=report.cpu_cap, image_uuid=report.image_uuid,
            customer_metadata=report.customer_metadata,
            internal_metadata=report.internal_metadata, tags=report.tags)
        if holds and report.server_uuid is not None:
            vm.claim_capacity(report.server_uuid, cause=cause)
        return vm
