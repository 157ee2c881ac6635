"""VMAPI's NIC actions: ``POST /vms/{uuid}?action=add_nics`` (``networks``, as CreateVm takes
them) and ``?action=remove_nics`` (``macs``). Each queues a job of its name for the VMAPI client
to wait on, in one transaction through the change loop (service/commands/change.py). An
``add_nics`` records its NICs and their address claims at once, so a full network or a taken
address is answered at once (a failed job removes them again); a ``remove_nics`` only checks
the MACs: its job records the NICs removed, and their addresses released, once the VM's server
applied the removal, so a failed job leaves the NICs and their claims as they were.

A repeated ``remove_nics`` (the same MACs) returns the VM's last job when that job is the same
removal, and appends nothing (api.md's repeat rule, ``Vm.matching_active_job``); one that is
a new job (another queued between) removes, when it runs, only the NICs the VM still has
(service/jobs/handlers.py, ``_remove_nics``). An
``add_nics`` asks for new NICs each time (new MACs, new addresses, as VMAPI's): a repeat adds
another, so it is never merged.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from domain.errors import InvalidTransitionError, UnallocatedVmError
from domain.job_queue import job_params
from domain.rules import refused
from domain.states import Action, JobName, VmState
from domain.vm import Cause, Vm
from service.commands.application import Accepted, Commands
from service.commands.change import IfMatch
from service.commands.idempotency import IdempotencyKey
from service.commands.networks import NicRequest
from service.commands.versioning import Behaviour, DestroyJob

# A NIC job's behaviour when its target already holds, in every version: it succeeds.
IF_ALREADY = "succeed"


def change_nics(commands: Commands, vm_uuid: str, *, behaviour: Behaviour, cause: Cause,
                add: list[NicRequest] | None = None, remove: list[str] | None = None,
                owner_uuid: str | None = None, if_match: IfMatch = None,
                idempotency: IdempotencyKey | None = None,
                context: dict[str, Any] | None = None) -> Accepted:
    """Add NICs on the networks ``add`` names, or queue the removal of the NICs ``remove``
    (MACs); ``context`` (the VMAPI client's ``x-context``) is kept in the job's
    ``params.context``, as every action that queues a job keeps it. Raises
    ``VmNotFoundError`` (also for another owner's VM), ``UnallocatedVmError`` (version 1, a
    provisioning VM, or one on no server: ``refuse_nic_change``),
    ``InvalidTransitionError``, ``VmBeingDestroyedError`` (version 2, a destroy ahead),
    ``NetworkNotFoundError``, ``NetworkFullError``, ``ValidationError`` and the change loop's
    errors."""
    name = JobName.ADD_NICS if add is not None else JobName.REMOVE_NICS
    job_cause = {**cause, "job_uuid": None}
    claimed: list[Any] = []  # the networks this attempt claimed addresses on

    def decide(vm: Vm) -> str:
        claimed.clear()  # (a repeat claims nothing)
        refuse_nic_change(VmState(vm.state), vm.has_server, name, behaviour,
                          placed=vm.shown_server_uuid is not None,
                          destroy_job=vm.active_destroy)
        if add is not None:
            claimed.extend(commands.allocate(vm, add, cause=job_cause))
            args: dict[str, Any] = {"nics": vm.nic_list[-len(add):]}
        else:
            args = {"macs": [nic["mac"] for nic in vm.nics_to_remove(remove or [])]}
        params = job_params(args, IF_ALREADY, behaviour.version, context)
        if add is None:  # a removal repeated merges; an add claims new addresses each time
            existing = vm.matching_active_job(name.value, params)
            if existing is not None:
                return str(existing["uuid"])
        job_uuid = str(uuidlib.uuid4())
        # a NIC change is an update of the VM as far as the rules table goes
        vm.queue_job(action=Action.UPDATE, job_uuid=job_uuid, name=name.value,
                     params=params, cause=job_cause)
        return job_uuid

    job_uuid, vm, position, replayed = commands.change(
        Vm, vm_uuid, decide, if_match=if_match, owner_uuid=owner_uuid,
        idempotency_key=idempotency,
        outcome=lambda job, vm: Accepted(str(vm.id), job, vm.version, None),
        also=lambda _job: list(claimed))
    if replayed is not None:
        return replayed
    return Accepted(str(vm.id), job_uuid, vm.version, position)


def refuse_nic_change(state: VmState, has_server: bool, name: JobName,
                      behaviour: Behaviour, *, placed: bool = False,
                      destroy_job: DestroyJob = None) -> None:
    """Refuse ``name`` (a NIC change) of a VM in ``state`` (on a server or not) unless
    ``behaviour`` admits it (``Behaviour.admits_nic_changes``, so that what is refused here is
    exactly what the refusals' ``allowed_actions`` leave out). A provisioning VM in version 1
    and a VM on no server that is not provisioning (its provision failed before placing it;
    an agent reported it on none: the change is carried out on the VM's server, and there is
    none) are refused as VMAPI answers an action on a VM with no ``server_uuid``
    (``UnallocatedVmError``; version 2 ``InvalidTransitionError`` for the latter, as the rules
    table answers start of such a VM); a state where no update is allowed with
    ``InvalidTransitionError``. ``placed``: the VM object shows a server
    (``Behaviour.admit``), which the refusal's ``allowed_actions`` count. ``destroy_job``:
    the VM's destroy job queued or running (``Vm.active_destroy``); a change the state
    admits is then ``VmBeingDestroyedError`` in version 2, which it could only fail behind
    (``Behaviour.refuse_behind_destroy``), before any address is claimed."""
    if behaviour.admits_nic_changes(state, has_server=has_server):
        behaviour.refuse_behind_destroy(state, name.value, destroy_job=destroy_job,
                                        has_server=has_server, placed=placed)
        return
    allowed = behaviour.allowed_actions(state, has_server=has_server, placed=placed,
                                        destroy_job=destroy_job)
    if refused(state, Action.UPDATE):
        raise InvalidTransitionError(state, name.value, allowed)
    if behaviour.major < 2:
        raise UnallocatedVmError(state, name.value, allowed)
    raise InvalidTransitionError(state, name.value, allowed, on_no_server=True)
