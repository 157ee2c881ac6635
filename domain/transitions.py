"""The VM state machine as one table: (state, event) -> new state.

Every pair not in the table is impossible; ``after`` refuses it. The table is read by the
command methods of ``domain.vm.Vm`` before they record an event, and walked whole by
``tests/domain/test_transitions.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from domain.errors import IllegalTransitionError
from domain.states import VmState

P, R, S, F, D, Q = (
    VmState.PROVISIONING,
    VmState.RUNNING,
    VmState.STOPPED,
    VmState.FAILED,
    VmState.DESTROYED,
    VmState.QUARANTINED,
)

# ``Released`` gives a quarantined VM back in the state it had before; the event carries it.
PREVIOUS: Final = "previous"

# The events that move a VM between states. Other events (Created, Job*, MetadataUpdated, ...)
# never change the state.
STATE_EVENTS: Final = (
    "Provisioned",
    "ProvisionFailed",
    "Started",
    "Stopped",
    "Rebooted",
    "Failed",
    "Destroyed",
    "Quarantined",
    "Released",
)

TRANSITIONS: Mapping[tuple[VmState, str], VmState | str] = {
    (P, "Provisioned"): R,
    (P, "ProvisionFailed"): F,
    (P, "Destroyed"): D,
    (P, "Quarantined"): Q,
    (R, "Stopped"): S,
    (R, "Rebooted"): R,
    (R, "Failed"): F,
    (R, "Destroyed"): D,
    (R, "Quarantined"): Q,
    (S, "Started"): R,
    (S, "Destroyed"): D,
    (S, "Quarantined"): Q,
    (F, "Started"): R,
    (F, "Stopped"): S,
    (F, "Destroyed"): D,
    (F, "Quarantined"): Q,
    (Q, "Released"): PREVIOUS,
    (Q, "Destroyed"): D,
}


# What a quarantined VM may record when its ``fence`` job adopts what the job the quarantine
# canceled did on the node (docs/jobs.md, "A quarantine while a job runs"): the VM stays
# quarantined, and the state ``Released`` gives it back in becomes the one the table gives
# that state for the event (``while_quarantined``). Not table rows: no other writer may record
# them on a quarantined VM.
ADOPTED_WHILE_QUARANTINED: Final = ("Started", "Stopped", "Rebooted")


def while_quarantined(previous: VmState, event_name: str, *, has_server: bool) -> VmState:
    """The state a quarantined VM to be given back in ``previous`` is given back in once
    ``event_name`` is recorded for it (``ADOPTED_WHILE_QUARANTINED``): ``after(previous,
    event_name)``. Raises ``IllegalTransitionError`` for another event, or a pair the table
    refuses (e.g. a ``Stopped`` of a VM to be given back stopped)."""
    if event_name not in ADOPTED_WHILE_QUARANTINED:
        raise IllegalTransitionError(state=VmState.QUARANTINED, event_name=event_name,
                                     has_server=has_server)
    return after(previous, event_name, has_server=has_server)


def after(state: VmState, event_name: str, previous: VmState | None = None, *,
          has_server: bool) -> VmState:
    """Return the state a VM in ``state`` reaches when ``event_name`` happens.

    ``previous`` is the state to restore for ``Released``. Raises ``IllegalTransitionError``
    for every pair the table does not list, saying whether the VM is on a server
    (``has_server``: the table does not depend on it, the refusal's allowed actions do).
    """
    target = TRANSITIONS.get((state, event_name))
    if target is None:
        raise IllegalTransitionError(state=state, event_name=event_name,
                                     has_server=has_server)
    if target == PREVIOUS:
        if previous is None:
            raise IllegalTransitionError(state=state, event_name=event_name,
                                         has_server=has_server)
        return previous
    return VmState(target)
