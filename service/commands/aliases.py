"""The aliases VMs hold (domain/alias_hold.py): per-owner alias uniqueness, as VMAPI's
``validateUniqueAlias`` has it. A mixin of ``service.commands.application.Commands``, whose
change loop records, for every VM it saves, the holds its events take and give up
(``_alias_effects``), in the same transaction as the VM's events.

What a VM holds is read off the VM as the change loaded it and as its decision left it
(``held_aliases``); a difference takes and releases holds. So every writer is covered
without knowing of aliases: CreateVm and UpdateVm (``reserve``: refused when taken), a
destroy, a failed provision or a failure recorded by a job, an agent report, the quarantine,
the trace replay (``release``, and ``adopt`` for what facts bring back).

All of it only with ``unique_aliases`` (``VMLEDGER_UNIQUE_ALIASES``, off by default): off,
the change loop reads and writes nothing about aliases. So holds may be missing or stale:
VMs that took their alias before holds were recorded, or while the setting was off, hold
none; a VM destroyed or renamed while it was off still holds its old alias on its hold.
Before a hold is first made, and before every reservation (``_reconcile``), the hold is
brought up to date: ``legacy_holders`` names the VMs the VM read model says are that owner's
with that alias, and each of those and of the hold's holders is checked against its own
stream: the hold adopts those that hold the alias and releases those that no longer do,
before anything else is decided on it. Not seen: such a VM the read model had not applied
yet, and the alias of an update job queued while holds were not recorded
(docs/vmapi-compatibility.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from domain.alias_hold import (
    AliasHold, AliasHoldNotFoundError, HoldKey, asked_aliases, held_aliases, hold_id,
)
from domain.errors import VmNotFoundError
from domain.vm import Vm

# The VMs a read model says ``owner_uuid`` has with ``alias`` (``VmQueries.with_alias``).
LegacyHolders = Callable[[str, str], list[str]]


def no_legacy_holders(_owner_uuid: str, _alias: str) -> list[str]:
    """The legacy holders where no read model is consulted: none."""
    return []


class AliasCommands:
    """The holds of aliases. Uses ``Commands``' loader (``load_aggregate``)."""

    load_aggregate: Any
    legacy_holders: LegacyHolders
    unique_aliases: bool

    def holds_before(self, vm: Vm) -> frozenset[HoldKey]:
        """What ``vm`` held before its pending events: nothing for a VM being made, else
        what its stream says before them (read again: a VM another aggregate's decision
        loaded, whose state before it is not kept)."""
        before = vm.version - len(vm.pending_events)
        if before < 1:
            return frozenset()
        return held_aliases(self.load_aggregate(Vm, vm.id, before))

    def _alias_effects(self, vm: Vm, before: frozenset[HoldKey],
                       holds: dict[UUID, AliasHold]) -> None:
        """Record on ``holds`` (loaded or made into it as needed) the holds ``vm``'s pending
        events take and give up, ``before`` being what it held before them: a pair it no
        longer holds is released; a new one is reserved when a client's request asked for
        it (``asked_aliases``), else adopted. A hold is brought up to date first
        (``_reconcile``) when it is made and before a reservation. Raises
        ``DuplicateAliasError`` (a reservation of an alias another VM holds)."""
        after = held_aliases(vm)
        if after == before:
            return
        vm_uuid, cause = str(vm.id), vm.pending_events[-1].cause
        for owner, alias in sorted(before - after):
            hold = self._hold(owner, alias, holds, cause, make=False)
            if hold is not None:
                hold.release(vm_uuid, cause=cause)
        asked = asked_aliases(vm)
        for owner, alias in sorted(after - before):
            hold = self._hold(owner, alias, holds, cause, make=True)
            assert hold is not None
            if (owner, alias) in asked:
                self._reconcile(hold, vm_uuid, cause)
                hold.reserve(vm_uuid, cause=cause)
            else:
                if hold.pending_events and isinstance(hold.pending_events[0], AliasHold.Opened):
                    self._reconcile(hold, vm_uuid, cause)  # a new hold
                hold.adopt(vm_uuid, cause=cause)

    def _hold(self, owner: str, alias: str, holds: dict[UUID, AliasHold], cause: Any, *,
              make: bool) -> AliasHold | None:
        """The hold of ``alias`` for ``owner``, from ``holds`` or loaded into it; with
        ``make``, a new empty one when there is none, else None."""
        uuid = hold_id(owner, alias)
        hold = holds.get(uuid)
        if hold is None:
            try:
                hold = self.load_aggregate(AliasHold, uuid)
            except AliasHoldNotFoundError:
                if not make:
                    return None
                hold = AliasHold.create(owner, alias, cause=cause)
            holds[uuid] = hold
        return hold

    def _reconcile(self, hold: AliasHold, vm_uuid: str, cause: Any) -> None:
        """Bring ``hold`` up to date with the VMs' own streams, where holds were not
        recorded (before the feature, or while ``VMLEDGER_UNIQUE_ALIASES`` was off): each VM
        but ``vm_uuid`` that the read model names (``legacy_holders``) or the hold lists, and
        that this save is not recording on it, is adopted when its stream says it holds the
        alias, released when it does not (destroyed, failed or renamed since)."""
        key = (hold.owner_uuid, hold.alias)
        recording = {event.vm_uuid for event in hold.pending_events
                     if not isinstance(event, AliasHold.Opened)}
        others = (set(hold.holders) | set(self.legacy_holders(*key))) - recording - {vm_uuid}
        for other in sorted(others):
            try:
                holds_it = key in held_aliases(self.load_aggregate(Vm, other))
            except VmNotFoundError:
                holds_it = False
            if holds_it:
                hold.adopt(other, cause=cause)
            else:
                hold.release(other, cause=cause)
