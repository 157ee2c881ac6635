"""The ``Vm`` aggregate's lifecycle events: the transitions of ``domain.transitions``' table
(provisioned, started, stopped, rebooted, failed, destroyed); ``domain.vm.Vm`` names each, e.g.
``Vm.Stopped``. Defined apart from the aggregate only to keep modules small (as
``domain.vm_events``): their topics (``TOPIC``), which the stored events carry, do not depend
on where they are defined.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from domain import transitions, vm_reports
from domain.states import DesiredState, VmState
from domain.vm_events import VmEvent

if TYPE_CHECKING:
    # The lifecycle these events change (a mixin of ``domain.vm.Vm``, which imports this
    # module), as ``domain.vm_events`` names the job queue.
    from domain.lifecycle import Lifecycle as Vm


def _moved(vm: Vm, event_name: str) -> None:
    """Move the VM's state as ``event_name`` does; a quarantined VM (its ``fence`` job adopting
    what the canceled job did on the node) stays quarantined, to be given back in the state
    the event leads to from the one it was to be given back in
    (``transitions.while_quarantined``)."""
    if VmState(vm.state) is VmState.QUARANTINED:
        quarantine = vm.quarantine
        previous = transitions.while_quarantined(
            VmState(quarantine["previous_state"]), event_name, has_server=vm.has_server)
        vm.quarantine = {**quarantine, "previous_state": previous.value}
        return
    vm.state = transitions.after(vm.state, event_name, has_server=vm.has_server)


class Provisioned(VmEvent):
    """The VM exists on a server and runs there."""

    TOPIC = "vm.provisioned"
    server_uuid: str

    def apply(self, vm: Vm) -> None:
        vm.state = transitions.after(vm.state, "Provisioned", has_server=vm.has_server)
        vm.server_uuid = self.server_uuid
        vm.error = None
        vm_reports.boots(vm)


class ProvisionFailed(VmEvent):
    """The VM could not be provisioned. ``copy_may_be_on``: the servers a copy of it may
    still be on (they did not answer, or removing the copy there failed); its destroy removes
    the copy there (``Vm.copy_servers``). Empty: every server answered that it has none."""

    TOPIC = "vm.provision_failed"
    error: str
    copy_may_be_on: list[str]

    # Version 2 added ``copy_may_be_on``.
    class_version = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """A provision that failed before the servers were kept named none (its VM's
        destroy asks no node, as it did)."""
        state["copy_may_be_on"] = []

    def apply(self, vm: Vm) -> None:
        vm.state = transitions.after(vm.state, "ProvisionFailed", has_server=vm.has_server)
        vm.error = {"reason": "provision_failed", "message": self.error}
        vm.copy_may_be_on = list(self.copy_may_be_on)


class Started(VmEvent):
    """The VM runs again (on ``server_uuid`` when it was placed anew). Recorded for a
    quarantined VM too, by its ``fence`` job (``_moved``), as ``Stopped`` and ``Rebooted``."""

    TOPIC = "vm.started"
    server_uuid: str | None

    def apply(self, vm: Vm) -> None:
        _moved(vm, "Started")
        if self.server_uuid is not None:
            vm.server_uuid = self.server_uuid
        vm.error = None
        vm_reports.boots(vm)


class Stopped(VmEvent):
    """The VM stopped (asked for, or the guest shut down)."""

    TOPIC = "vm.stopped"

    def apply(self, vm: Vm) -> None:
        _moved(vm, "Stopped")
        vm.error = None


class Rebooted(VmEvent):
    """The VM was rebooted and runs."""

    TOPIC = "vm.rebooted"

    def apply(self, vm: Vm) -> None:
        _moved(vm, "Rebooted")
        vm_reports.boots(vm)


class Failed(VmEvent):
    """The VM stopped working: its host rebooted (the trace replay: evicted it), or its guest
    crashed."""

    TOPIC = "vm.failed"
    reason: str
    message: str

    def apply(self, vm: Vm) -> None:
        vm.state = transitions.after(vm.state, "Failed", has_server=vm.has_server)
        vm.error = {"reason": self.reason, "message": self.message}


class Destroyed(VmEvent):
    """The VM is gone. Nothing is ever removed from its stream. ``addresses_kept``: its NICs'
    addresses are not released with it but by its ``fence`` job, once that job has fenced every
    server a copy may be on (``AddressesReleased``; docs/jobs.md): a canceled worker's late
    call could still configure a copy there with them."""

    TOPIC = "vm.destroyed"
    addresses_kept: bool

    # Version 2 added ``addresses_kept``.
    class_version = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """A VM destroyed before addresses could be kept released them with its Destroyed."""
        state["addresses_kept"] = False

    def apply(self, vm: Vm) -> None:
        vm.state = transitions.after(vm.state, "Destroyed", has_server=vm.has_server)
        vm.desired_state = DesiredState.DESTROYED
        vm.destroyed_at = self.timestamp
        vm.addresses_kept = self.addresses_kept
