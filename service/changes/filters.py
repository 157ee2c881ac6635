"""Which changes a stream shows: the caller's filters, within what its role may see."""

from __future__ import annotations

from dataclasses import dataclass

from service.changes.records import Change


@dataclass(frozen=True)
class ChangeFilter:
    """A stream's filters (``None``: any). ``vm_uuids``, ``types`` and ``states`` match any of
    their values; ``owner_uuid``, ``server_uuid`` and ``state`` compare with the resource's
    after the event. ``scope_owner`` is an owner token's own owner: its streams show only
    changes of VMs that owner holds after the event (so not a VM's events while it is in the
    operator quarantine), whatever the other filters say."""

    vm_uuids: frozenset[str] | None = None
    owner_uuid: str | None = None
    server_uuid: str | None = None
    types: frozenset[str] | None = None
    states: frozenset[str] | None = None
    scope_owner: str | None = None

    def matches(self, change: Change) -> bool:
        """Whether ``change`` is shown."""
        if self.scope_owner is not None and (
                change.kind != "vm" or change.owner_uuid != self.scope_owner):
            return False
        if self.vm_uuids is not None and (change.kind != "vm" or change.uuid not in self.vm_uuids):
            return False
        if self.owner_uuid is not None and change.owner_uuid != self.owner_uuid:
            return False
        if self.server_uuid is not None and change.server_uuid != self.server_uuid:
            return False
        if self.types is not None and change.type not in self.types:
            return False
        return self.states is None or change.state in self.states
