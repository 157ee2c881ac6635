"""The command rules as one table: (state, action) -> verdict.

A verdict says what asking for ``action`` of a VM in ``state`` does:

- ``ALLOWED``: a job is queued and will run when it gets the ticket.
- ``QUEUED``: only possible behind the running provision (the VM has no server yet). API
  version 2 queues the job; version 1 refuses it as VMAPI does (``UnallocatedVM``), but for
  the destroy of a VM its provision has placed (VMAPI's deleteVm checks only the VM's
  ``server_uuid``, which such a VM shows: ``Vm.shown_server_uuid``), queued as version 2's.
- ``ALREADY``: the action's target already holds (stop on stopped). Version 1 queues a job that
  fails unless ``idempotent=true``; version 2 queues a job that succeeds doing nothing.
  For destroy on a destroyed VM, version 2 refuses (``VmAlreadyDestroyed``).
- ``REFUSED``: impossible in this state (``InvalidTransition``, with the allowed actions).
- ``UNALLOCATED``: allowed by the table, but the action acts on the VM's compute node and
  the VM is on none (a provision that failed before placing it, a VM its agent reported on
  no server). Version 1 refuses it as VMAPI does (``UnallocatedVM``), version 2 as an
  impossible action; it is not among the allowed actions either.

How each version answers a verdict is decided in one place, ``service.commands.versioning``;
the job handlers ask the same ``verdict`` at the ticket. A job asked for while a destroy is
queued or running gets its ticket after it, so it meets the ``DESTROYED`` row there
(``fails_behind_destroy``).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from domain.errors import InvalidTransitionError
from domain.states import JOB_FOR_ACTION, Action, VmState


class Verdict(StrEnum):
    """What asking for an action in a state does (see the module docstring)."""

    ALLOWED = "allowed"
    QUEUED = "queued"
    ALREADY = "already"
    REFUSED = "refused"
    UNALLOCATED = "unallocated"


A, Qd, Al, X = Verdict.ALLOWED, Verdict.QUEUED, Verdict.ALREADY, Verdict.REFUSED
_COLUMNS = (
    Action.START,
    Action.STOP,
    Action.KILL,
    Action.REBOOT,
    Action.UPDATE,
    Action.DESTROY,
    Action.QUARANTINE,
    Action.RELEASE,
)
_ROWS: Mapping[VmState, tuple[Verdict, ...]] = {
    #                       start stop kill reboot update destroy quarantine release
    VmState.PROVISIONING: (Qd,   Qd,  Qd,  Qd,    Qd,    Qd,     A,         X),
    VmState.RUNNING:      (Al,   A,   A,   A,     A,     A,      A,         X),
    VmState.STOPPED:      (A,    Al,  Al,  X,     A,     A,      A,         X),
    VmState.FAILED:       (A,    A,   A,   X,     A,     A,      A,         X),
    VmState.DESTROYED:    (X,    X,   X,   X,     X,     Al,     X,         X),
    VmState.QUARANTINED:  (X,    X,   X,   X,     X,     A,      Al,        A),
}  # fmt: skip

RULES: Mapping[tuple[VmState, Action], Verdict] = {
    (state, action): verdict
    for state, row in _ROWS.items()
    for action, verdict in zip(_COLUMNS, row, strict=True)
}


#: The actions carried out on the VM's compute node: a VM on none has nothing to act on.
ON_ITS_SERVER = frozenset({Action.START, Action.STOP, Action.KILL, Action.REBOOT})


def verdict(state: VmState, action: Action, *, has_server: bool) -> Verdict:
    """The verdict of the rules table for ``action`` on a VM in ``state``; ``UNALLOCATED``
    for one it allows that acts on the VM's server when the VM has none (``has_server``,
    never assumed: every caller knows the VM)."""
    found = RULES[(state, action)]
    if found is Verdict.ALLOWED and not has_server and action in ON_ITS_SERVER:
        return Verdict.UNALLOCATED
    return found


def refused(state: VmState, action: Action) -> bool:
    """Whether the table refuses ``action`` in ``state``, on a server or not (a NIC change is
    an update as far as the table goes; a metadata update is refused where it refuses one)."""
    return RULES[(state, action)] is Verdict.REFUSED


def require(state: VmState, action: Action, *, has_server: bool) -> Verdict:
    """The verdict for ``action`` on a VM in ``state`` (on a server or not: ``has_server``,
    never assumed, so the allowed actions a refusal names are the VM's own),
    unless it is ``REFUSED`` or ``UNALLOCATED``: then raises ``InvalidTransitionError``
    naming the actions that are allowed. The one place a refusal of the table is raised
    (queueing a job, admitting a request, the quarantine)."""
    found = verdict(state, action, has_server=has_server)
    if found in (Verdict.REFUSED, Verdict.UNALLOCATED):
        raise InvalidTransitionError(state, action.value,
                                     allowed_actions(state, has_server=has_server),
                                     on_no_server=found is Verdict.UNALLOCATED)
    return found


#: The NIC changes (``?action=add_nics|remove_nics``): an update of the VM as far as the
#: table goes, carried out on the VM's server.
NIC_CHANGES = ("add_nics", "remove_nics")


def fails_behind_destroy(action: Action | str) -> bool:
    """Whether a job for ``action`` (an action of the table, or a NIC change: an update as far
    as the table goes) asked for while the VM's destroy job is queued or running could only
    fail because of it: the queue runs in order, so the job gets the ticket once the destroy
    has run, on a destroyed VM, where the table refuses it (start, stop, kill, reboot,
    update). A destroy finds its target holding (``ALREADY``); the quarantine and the release
    queue no job (they are recorded at once, ahead of the destroy). Such a job would succeed
    only if the destroy failed, which the client that asked for the destroy did not mean.
    API version 2 refuses it (``VmBeingDestroyedError``), version 1 queues it as VMAPI does
    (docs/api.md, "Contract: DeleteVm and actions")."""
    table_action = Action.UPDATE if action in NIC_CHANGES else Action(action)
    return (table_action in JOB_FOR_ACTION
            and RULES[(VmState.DESTROYED, table_action)] is Verdict.REFUSED)


def nic_changes_allowed(state: VmState, *, has_server: bool) -> bool:
    """Whether a VM in ``state`` may change its NICs: where the table allows an update, on
    the VM's server, or behind the provision that places a provisioning VM. A VM on no server
    otherwise has no node to carry the change out (its job would "succeed" changing nothing
    while an added NIC held an address: TRITON-394)."""
    if RULES[(state, Action.UPDATE)] is Verdict.REFUSED:
        return False
    return has_server or state is VmState.PROVISIONING


def allowed_actions(state: VmState, *, has_server: bool) -> list[str]:
    """The actions neither refused nor unallocated for a VM in ``state`` (on a server or not:
    ``has_server``, never assumed: a VM on none refuses start, stop and kill), in table order,
    the NIC changes after ``update`` (for error bodies: every action a client may ask)."""
    names = [a.value for a in _COLUMNS
             if verdict(state, a, has_server=has_server)
             not in (Verdict.REFUSED, Verdict.UNALLOCATED)]
    if nic_changes_allowed(state, has_server=has_server):
        after_update = names.index(Action.UPDATE.value) + 1
        names[after_update:after_update] = NIC_CHANGES
    return names
