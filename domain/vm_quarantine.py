"""The operator quarantine's events (design.md, lesson 3): a VM taken from its owner, and
given back in the state it had. ``domain.vm.Vm`` names them (``Vm.Quarantined``,
``Vm.Released``) and records them (``domain.lifecycle``); defined apart from the aggregate's
other events only to keep modules small: the stored events name them by ``TOPIC``."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid5

from domain import transitions
from domain.states import VmState
from domain.vm_events import VmEvent

# The operator quarantine takes over a quarantined VM (design.md, lesson 3).
QUARANTINE_OWNER_UUID = str(uuid5(UUID(int=0), "vmledger:quarantine"))


class Quarantined(VmEvent):
    """The VM was taken from its owner into the operator quarantine."""

    TOPIC = "vm.quarantined"
    reason: str

    def apply(self, vm: Any) -> None:
        previous_state = vm.state
        vm.state = transitions.after(vm.state, "Quarantined", has_server=vm.has_server)
        vm.quarantine = {
            "reason": self.reason,
            "since": self.timestamp,
            "previous_owner_uuid": vm.owner_uuid,
            "previous_state": previous_state.value
            if isinstance(previous_state, VmState)
            else previous_state,
        }
        vm.owner_uuid = QUARANTINE_OWNER_UUID


class Released(VmEvent):
    """The VM was given back to its owner in the state it had."""

    TOPIC = "vm.released"

    def apply(self, vm: Any) -> None:
        quarantine = vm.quarantine
        vm.state = transitions.after(
            vm.state, "Released", VmState(quarantine["previous_state"]),
            has_server=vm.has_server,
        )
        vm.owner_uuid = quarantine["previous_owner_uuid"]
        vm.quarantine = None
