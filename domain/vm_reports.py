"""What compute agents report of a VM that is not a lifecycle transition: a VM reported without
a generation number, as Triton's vm-agent sends it to VMAPI's ``PUT /vms/{uuid}`` (the whole VM
object, with its ``last_modified``), and the copy a host reboot took from a VM nothing else
recorded it of.

- A VM the log never had, found on a host by its agent, is recorded as it was found
  (``Discovered``): in the state reported, on the server reported (or none), with no job.
- Reports carry no generation, so they are ordered by the object's ``last_modified``: the
  newest applied is remembered (``AgentReported``), and one not newer changes nothing. A
  report is remembered when it is the VM's own server's in a state the log models, or with
  what it changed; any other changes nothing and is not remembered.

- A host reboot takes every VM on the host with it. A running VM records it as ``Failed``; a
  stopped or quarantined one changes no state, so it records ``CopyLost`` (the server and its
  new boot id) until it boots again (``Provisioned``, ``Started``, ``Rebooted`` clear it) or a
  report of that server lists it again (``CopyFound``: a copy started there by other means,
  an operator's by hand). A later report of that server under that boot id that no longer
  lists it is then read as that reboot, not as an agent that forgot it
  (``service/commands/agents.py``).

- A node numbers everything that happens on it (``seq``: one per server, bumped by every
  operation on a VM copy there and by everything its guests do), and each of its answers
  and each inventory report says the number it is as of. A job step that asked the node of
  the VM records the number of its answer (``NodeObserved``); a report as of a number not
  newer than that was taken before the step, so it changes nothing for the VM (it is older
  than what the log records: the VM's missing from it is not "the agent forgot it", its
  stopped copy not a guest shutdown). A report without a number (an older agent's, and
  vm-agent's, which has none) is ordered against other reports alone, by its generation or
  its ``last_modified``, as before (docs/api.md, "Compute agents").

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


class CopyLost(VmEvent):
    """The VM's host ``server_uuid`` rebooted (``boot_id``) and the copy there went with it,
    while the VM was stopped or quarantined (nothing else records it)."""

    TOPIC = "vm.copy_lost"
    server_uuid: str
    boot_id: str

    def apply(self, vm: Reports) -> None:
        vm.lost_copy = {"server_uuid": self.server_uuid, "boot_id": self.boot_id}


class CopyFound(VmEvent):
    """A report of ``server_uuid`` (under ``boot_id``) lists the VM again after a reboot there
    took its copy (``CopyLost``): a copy is there once more, though no boot of it was
    recorded (an operator started it by hand), so the reboot no longer explains its absence."""

    TOPIC = "vm.copy_found"
    server_uuid: str
    boot_id: str

    def apply(self, vm: Reports) -> None:
        vm.lost_copy = None


class NodeObserved(VmEvent):
    """A job step asked the node ``server_uuid`` of the VM, and its answer was as of the
    node's sequence number ``seq`` (recorded with the step, in the same save): what the log
    records of the VM there from then on is at least that new."""

    TOPIC = "vm.node_observed"
    server_uuid: str
    seq: int

    def apply(self, vm: Reports) -> None:
        vm.node_seen = {"server_uuid": self.server_uuid, "seq": self.seq}


def boots(vm: Reports) -> None:
    """What every boot of the VM (``Provisioned``, ``Started``, ``Rebooted``) also does: the
    copy a host reboot took is replaced by the one that runs now."""
    vm.lost_copy = None


class Reports:
    """The commands of generation-less agent reports."""

    trigger_event: Any
    pending_events: Any
    _create: Any
    lost_copy: dict[str, str] | None
    node_seen: dict[str, Any] | None  # the newest NodeObserved: {server_uuid, seq}, or None
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

    def record_report(self, reported_at: datetime, *, cause: Cause, observed: bool) -> bool:
        """Remember that reports up to ``reported_at`` were applied (call it after the events
        the report caused); return whether it was remembered. ``observed``: the report is
        the VM's own server's, in a state the log models. Such a report orders that server's
        later ones even when it agreed with the log: one dated before it that arrives late is
        stale, and must not undo what it saw (VMAPI keeps every applied report's
        ``last_modified``). Any other report is remembered only with the events it caused:
        one about another server, with no server, or in a state nothing is recorded of
        changes nothing, so it moves no mark (docs/events.md ``AgentReported``; a tester's
        report about another server, dated half an hour ahead, had the real reports
        ignored)."""
        if not (observed or self.pending_events):
            return False
        self.trigger_event(AgentReported, cause=cause, reported_at=reported_at)
        return True

    def record_copy_lost(self, server_uuid: str, boot_id: str, *, cause: Cause) -> bool:
        """Record that the reboot of ``server_uuid`` (now ``boot_id``) took the VM's copy
        there; False (nothing recorded) when this reboot is recorded already."""
        if self.lost_copy == {"server_uuid": server_uuid, "boot_id": boot_id}:
            return False
        self.trigger_event(CopyLost, cause=cause, server_uuid=server_uuid, boot_id=boot_id)
        return True

    def record_copy_found(self, server_uuid: str, boot_id: str, *, cause: Cause) -> bool:
        """Record that a report of ``server_uuid`` (now ``boot_id``) lists the VM, whose copy
        there a reboot took; False (nothing recorded) when no copy there is known lost."""
        lost = self.lost_copy or {}
        if lost.get("server_uuid") != server_uuid:
            return False
        self.trigger_event(CopyFound, cause=cause, server_uuid=server_uuid, boot_id=boot_id)
        return True

    def copy_lost_on(self, server_uuid: str, boot_id: str) -> bool:
        """Whether the reboot of ``server_uuid`` that gave it ``boot_id`` took the VM's copy
        there, and no boot nor report since found it there again. Only under that boot id:
        after another reboot the reports say afresh what the host has (api.md)."""
        # A VM stored before CopyLost existed (a snapshot without the field) lost none.
        return self.lost_copy == {"server_uuid": server_uuid,
                                                    "boot_id": boot_id}

    def record_node_seen(self, server_uuid: str, seq: int, *, cause: Cause) -> bool:
        """Record that a job step's answer from ``server_uuid`` was as of its sequence
        number ``seq`` (``NodeObserved``); False (nothing recorded) when the log has that one
        or a newer one of that server already (a node's numbers only grow)."""
        seen = self.node_seen
        if seen is not None and seen["server_uuid"] == server_uuid and seen["seq"] >= seq:
            return False
        self.trigger_event(NodeObserved, cause=cause, server_uuid=server_uuid, seq=seq)
        return True

    def is_older_than_recorded(self, server_uuid: str, seq: int | None) -> bool:
        """Whether a report of ``server_uuid`` as of its sequence number ``seq`` was taken
        no later than the newest answer of that node a job step recorded: then it is older
        than what the log records of the VM, and must change nothing for it. False when the
        report carries no number, or the log recorded none of that server (a VM placed
        before nodes numbered their answers, or by a driver that does not): nothing orders
        them, and the report is applied as before."""
        seen = self.node_seen
        return seq is not None and seen is not None and \
            seen["server_uuid"] == server_uuid and seq <= seen["seq"]
