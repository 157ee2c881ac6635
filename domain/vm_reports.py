"""What a compute agent reports of a VM without a generation number, as Triton's vm-agent sends
it to VMAPI's ``PUT /vms/{uuid}`` (the whole VM object, with its ``last_modified``).

- A VM the log never had, found on a host by its agent, is recorded as it was found
  (``Discovered``): in the state reported, on the server reported (or none), with no job.
- Reports carry no generation, so they are ordered by the object's ``last_modified``: the
  newest applied is remembered (``AgentReported``), and one not newer changes nothing.

A mixin of ``domain.vm.Vm``; the events are named on it (``Vm.Discovered``, a kind of
``Vm.Created``, so every read model folds it as a creation).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from domain.states import DesiredState, VmState
from domain.events import Cause
from domain.vm_events import VmEvent

# The states a VM found on a host can be recorded in.
DISCOVERABLE = frozenset({VmState.RUNNING, VmState.STOPPED, VmState.FAILED})
_DESIRED = {VmState.RUNNING: DesiredState.RUNNING, VmState.STOPPED: DesiredState.STOPPED,
            VmState.FAILED: DesiredState.RUNNING}


def found(vm: Reports, state: str, server_uuid: str | None, reported_at: datetime | None) -> None:
    """``Vm.Discovered``'s own fields: the VM as its agent found it."""
    vm.state = VmState(state)
    vm.desired_state = _DESIRED[VmState(state)]
    vm.server_uuid = server_uuid
    vm.reported_at = reported_at


class AgentReported(VmEvent):
    """A generation-less report up to ``reported_at`` (its ``last_modified``) was applied."""

    TOPIC = "vm.agent_reported"
    reported_at: datetime

    def apply(self, vm: Reports) -> None:
        vm.reported_at = self.reported_at


class Reports:
    """The commands of generation-less agent reports."""

    trigger_event: Any
    _create: Any
    Discovered: Any

    @classmethod
    def discover(cls, *, vm_uuid: UUID, state: str, server_uuid: str | None, owner_uuid: str,
                 brand: str, ram: int, cause: Cause, reported_at: datetime | None = None,
                 **spec: Any) -> Reports:
        """Record a VM found on a host in ``state`` (running, stopped or failed). Raises
        ``ValueError`` for another state: there is nothing to record of a VM found gone."""
        if VmState(state) not in DISCOVERABLE:
            raise ValueError(f"a VM found {state} is not recorded")
        fields = {"alias": None, "cpu_cap": None, "image_uuid": None,
                  "persistence": "persistent", "customer_metadata": {},
                  "internal_metadata": {}, "tags": {}, "volumes": [], **spec}
        return cls._create(cls.Discovered, id=vm_uuid, cause=cause, owner_uuid=owner_uuid,
                           brand=brand, ram=ram, state=state, server_uuid=server_uuid,
                           reported_at=reported_at, **fields)

    def is_stale_report(self, reported_at: datetime) -> bool:
        """Whether a report as of ``reported_at`` is not newer than the last one applied."""
        last = getattr(self, "reported_at", None)
        return last is not None and reported_at <= last

    def record_report(self, reported_at: datetime, *, cause: Cause) -> None:
        """Remember that reports up to ``reported_at`` were applied."""
        self.trigger_event(AgentReported, cause=cause, reported_at=reported_at)
