"""The command rules as one table: (state, action) -> verdict.

A verdict says what asking for ``action`` of a VM in ``state`` does:

- ``ALLOWED``: a job is queued and will run when it gets the ticket.
- ``QUEUED``: only possible behind the running provision (the VM has no server yet). API
  version 2 queues the job; version 1 refuses it as VMAPI does (``UnallocatedVM``).
- ``ALREADY``: the action's target already holds (stop on stopped). Version 1 queues a job that
  fails unless ``idempotent=true``; version 2 queues a job that succeeds doing nothing.
  For destroy on a destroyed VM, version 2 refuses (``VmAlreadyDestroyed``).
- ``REFUSED``: impossible in this state (``InvalidTransition``, with the allowed actions).

How each version answers a verdict is decided in one place, ``service.api.versioning``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from domain.errors import InvalidTransitionError
from domain.states import Action, VmState


class Verdict(StrEnum):
    """What asking for an action in a state does (see the module docstring)."""

    ALLOWED = "allowed"
    QUEUED = "queued"
    ALREADY = "already"
    REFUSED = "refused"


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


def verdict(state: VmState, action: Action) -> Verdict:
    """Return the verdict of the rules table for ``action`` on a VM in ``state``."""
    return RULES[(state, action)]


def require(state: VmState, action: Action) -> Verdict:
    """The verdict for ``action`` on a VM in ``state``, unless the table refuses it: then
    raises ``InvalidTransitionError`` naming the actions that are allowed. The one place a
    refusal of the table is raised (queueing a job, admitting a request, the quarantine)."""
    found = verdict(state, action)
    if found is Verdict.REFUSED:
        raise InvalidTransitionError(state, action.value, allowed_actions(state))
    return found


def allowed_actions(state: VmState) -> list[str]:
    """The actions not refused in ``state``, in table order (for error bodies)."""
    return [a.value for a in _COLUMNS if RULES[(state, a)] is not Verdict.REFUSED]
