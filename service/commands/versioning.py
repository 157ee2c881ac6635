"""API versions' behaviours, and the one place where they differ (api.md, "Contract:
DeleteVm and actions, version 1 and version 2"); which version a request is served is
``service.commands.version_ranges``' (``negotiate``).

Version 1 is VMAPI's behaviour and never changes (Triton ZAPI-685/ZAPI-782: changing DeleteVm
broke clients twice). Version 2 is the improved behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from domain import rules
from domain.errors import (
    InvalidTransitionError,
    UnallocatedVmError,
    VmAlreadyDestroyedError,
    VmBeingDestroyedError,
)
from domain.rules import Verdict
from domain.states import Action, VmState
from service.commands.version_ranges import SUPPORTED_VERSIONS, parse_version

# Every refusal of an action because of the VM's state, or of its queue: each names the
# actions its version admits (``Behaviour.allowed_actions``)
REFUSALS = (InvalidTransitionError, UnallocatedVmError, VmAlreadyDestroyedError,
            VmBeingDestroyedError)
# What ``Vm.active_destroy`` gives: the destroy job ahead of any job queued now, or None
DestroyJob = Mapping[str, Any] | None


class IfAlready(StrEnum):
    """What a job does when, at its ticket, its target state already holds."""

    FAIL = "fail"  # v1 without idempotent=true: "Cannot stop a VM from a 'stopped' state"
    SUCCEED = "succeed"  # v2, or idempotent=true: succeed doing nothing


@dataclass(frozen=True)
class JobPlan:
    """How an admitted action is queued."""

    if_already: IfAlready
    cancel_queued_provision: bool = False
    destroy_now: bool = False  # no job: record the VM destroyed at once


@dataclass(frozen=True)
class Behaviour:
    """The behaviour of one API version."""

    version: str

    @property
    def major(self) -> int:
        return parse_version(self.version)[0]

    def admit(
        self, state: VmState, action: Action, *, vm_uuid: str, idempotent: bool = False,
        server_removed: bool = False, has_server: bool = True, placed: bool = False,
        destroy_job: DestroyJob = None,
    ) -> JobPlan:
        """Decide whether ``action`` on a VM in ``state`` queues a job, and how.

        ``server_removed``: the VM's server was removed from the fleet; version 2 destroys
        such a VM at once (204, no job), version 1 queues a destroy job that fails there.
        ``has_server``: whether the VM is on a server; version 1 refuses to delete a running
        or stopped VM on none (VMAPI: "Cannot delete a VM with no server_uuid": one an agent
        reported with ``server_uuid: null``). A failed VM is deleted as the table says. An
        action carried out on the VM's server (start, stop, kill, reboot) of a VM on none is
        ``UnallocatedVmError`` in version 1 and ``InvalidTransitionError`` in version 2
        (``Verdict.UNALLOCATED``).
        ``placed``: the VM object shows a server (``Vm.shown_server_uuid``), though the VM is
        not on it yet: a provisioning VM whose provision claimed one. Version 1 deletes such
        a VM as VMAPI does, whose deleteVm refuses only a VM with no ``server_uuid`` and
        whose createVm gives a provisioning VM its server at once (sdc-vmapi
        ``lib/endpoints/vms.js``): with version 2's destroy job, queued behind the provision.
        ``destroy_job``: the VM's destroy job queued or running (``Vm.active_destroy``), ahead
        of any job queued now; version 2 refuses what could only fail behind it
        (``refuse_behind_destroy``), once the state admits the action.
        Raises ``InvalidTransitionError`` (both versions), ``UnallocatedVmError`` (v1, no
        server), ``VmAlreadyDestroyedError`` (v2 DELETE of a destroyed VM) or
        ``VmBeingDestroyedError`` (v2, behind a destroy), each with this version's
        ``allowed_actions`` (``allowed_actions``): every refusal because of state names them
        (api.md, "Errors"; contract tester: the second and third had none).
        """
        try:
            plan = self._plan(state, action, vm_uuid=vm_uuid, idempotent=idempotent,
                              server_removed=server_removed, has_server=has_server,
                              placed=placed)
            self.refuse_behind_destroy(state, action.value, destroy_job=destroy_job,
                                       has_server=has_server, placed=placed)
            return plan
        except REFUSALS as refusal:
            refusal.allowed_actions = self.allowed_actions(
                state, has_server=has_server, placed=placed, destroy_job=destroy_job)
            raise

    def require(self, state: VmState, action: Action, *, has_server: bool,
                placed: bool = False, destroy_job: DestroyJob = None) -> Verdict:
        """``rules.require``, its refusal naming the actions this version admits (the
        quarantine's, which no version answers otherwise; ``placed`` and ``destroy_job`` as
        ``admit``'s). The quarantine and the release queue no job, so no destroy refuses
        them."""
        try:
            return rules.require(state, action, has_server=has_server)
        except REFUSALS as refusal:
            refusal.allowed_actions = self.allowed_actions(
                state, has_server=has_server, placed=placed, destroy_job=destroy_job)
            raise

    def refuse_behind_destroy(self, state: VmState, action: str, *, destroy_job: DestroyJob,
                              has_server: bool, placed: bool = False) -> None:
        """Raise ``VmBeingDestroyedError``, naming ``destroy_job`` and the actions this
        version admits, when this is version 2 and ``action`` (an action's or a NIC
        change's name) could only fail behind that destroy (``rules.fails_behind_destroy``:
        its job would run on the destroyed VM). Version 1 queues such a job, as VMAPI does,
        and it fails at its turn (api.md, "Contract: DeleteVm and actions")."""
        if destroy_job is None or not self._behind_destroy(action, destroy_job):
            return
        raise VmBeingDestroyedError(
            state, action, destroy_job["uuid"], destroy_job["execution"],
            self.allowed_actions(state, has_server=has_server, placed=placed,
                                 destroy_job=destroy_job))

    def _behind_destroy(self, action: str, destroy_job: DestroyJob) -> bool:
        return (self.major >= 2 and destroy_job is not None
                and rules.fails_behind_destroy(action))

    def allowed_actions(self, state: VmState, *, has_server: bool,
                        placed: bool = False, destroy_job: DestroyJob = None) -> list[str]:
        """The actions of the rules table that this version admits for a VM in ``state``
        (on a server or not: ``has_server``; shown on one: ``placed``; its destroy job
        ahead: ``destroy_job``, as ``admit``'s), in table order: what a refusal names, only
        what would be accepted (api.md). The table's own list but for what the version
        refuses: version 1 what waits for the provision (a quarantine aside, and deleting a
        placed VM) and deleting a running or stopped VM on no server; version 2 deleting a
        destroyed VM, and what could only fail behind a destroy."""
        return [name for name in rules.allowed_actions(state, has_server=has_server)
                if not self._behind_destroy(name, destroy_job)
                and (self.admits_nic_changes(state, has_server=has_server)
                     if name in rules.NIC_CHANGES
                     else self._admits(state, Action(name), has_server, placed))]

    def admits_nic_changes(self, state: VmState, *, has_server: bool) -> bool:
        """Whether this version takes ``add_nics`` or ``remove_nics`` of a VM in ``state``:
        where the table allows them (``rules.nic_changes_allowed``), but for a provisioning
        VM in version 1, refused as VMAPI does (``UnallocatedVM``)."""
        if state is VmState.PROVISIONING and self.major < 2:
            return False
        return rules.nic_changes_allowed(state, has_server=has_server)

    def _admits(self, state: VmState, action: Action, has_server: bool, placed: bool) -> bool:
        try:
            self._plan(state, action, vm_uuid="", has_server=has_server, placed=placed)
        except REFUSALS:
            return False
        return True

    def _plan(
        self, state: VmState, action: Action, *, vm_uuid: str, idempotent: bool = False,
        server_removed: bool = False, has_server: bool = True, placed: bool = False,
    ) -> JobPlan:
        """``admit``'s decision; a refusal names the rules table's allowed actions."""
        try:
            verdict = rules.require(state, action, has_server=has_server)
        except InvalidTransitionError as refusal:
            if refusal.on_no_server and self.major < 2:  # Verdict.UNALLOCATED
                raise UnallocatedVmError(state, action.value) from None
            raise
        if (action is Action.DESTROY and not has_server and self.major < 2
                and state in (VmState.RUNNING, VmState.STOPPED)):
            raise UnallocatedVmError(state, action.value)
        if (action is Action.DESTROY and server_removed and verdict is Verdict.ALLOWED
                and self.major >= 2):
            return JobPlan(if_already=IfAlready.SUCCEED, destroy_now=True)
        if verdict is Verdict.QUEUED:
            # version 1 waits for nothing, as VMAPI: but its DeleteVm checks only the VM's
            # server_uuid, which a placed provisioning VM shows (``placed``)
            v1_delete = action is Action.DESTROY and placed
            if self.major < 2 and action is not Action.QUARANTINE and not v1_delete:
                raise UnallocatedVmError(state, action.value)
            return JobPlan(
                if_already=IfAlready.SUCCEED,
                cancel_queued_provision=action is Action.DESTROY,
            )
        if verdict is Verdict.ALREADY and action is Action.DESTROY and self.major >= 2:
            raise VmAlreadyDestroyedError(vm_uuid)
        return JobPlan(if_already=self.if_already(action, idempotent=idempotent))

    def if_already(self, action: Action, *, idempotent: bool) -> IfAlready:
        """What a job for ``action`` admitted in this version does when its target state
        already holds: what tells two requests of one action apart (a repeat merges only
        into an active job that behaves as it would; ``Vm.matching_active_job``)."""
        # A delete finding its VM already destroyed succeeds doing nothing in version 1 too,
        # whether the VM was destroyed before the request or while the job waited its ticket.
        if self.major >= 2 or idempotent or action is Action.DESTROY:
            return IfAlready.SUCCEED
        return IfAlready.FAIL


def behaviour_for(version: str) -> Behaviour:
    """The behaviour of a negotiated version."""
    return Behaviour(version)


NEWEST = Behaviour(max(SUPPORTED_VERSIONS, key=parse_version))
OLDEST = Behaviour(min(SUPPORTED_VERSIONS, key=parse_version))
