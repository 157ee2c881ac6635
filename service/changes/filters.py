"""Which changes a stream shows: the caller's filters, within what its role may see."""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass
from functools import cache

from eventsourcing.domain import Aggregate

from domain.events import DomainEvent
from domain.server import SERVER_STATUSES
from domain.states import VmState
from domain.visibility import owner_sees
from service.changes.records import Change

#: The states a change's resource may be in after it (``state`` filters).
STATES = frozenset({*VmState, *SERVER_STATUSES})
#: The filters whose values are uuids (compared in their canonical, lowercase text).
UUID_FILTERS = ("vm_uuid", "owner_uuid", "server_uuid")


@cache
def event_types() -> frozenset[str]:
    """The names of the event classes the log can hold (the ``type`` a change may have): each
    domain event with a topic of its own, but not the bases (``DomainEvent``, each aggregate's
    ``Event``), which no aggregate triggers, nor the library's own subclasses (no topic)."""
    bases = {aggregate.Event for aggregate in _subclasses(Aggregate)}
    return frozenset(cls.__name__ for cls in _subclasses(DomainEvent)
                     if cls not in bases and "TOPIC" in vars(cls))


def _subclasses(cls: type) -> list[type]:
    """Every subclass of ``cls``, at any depth."""
    found: list[type] = []
    pending = list(cls.__subclasses__())
    while pending:
        subclass = pending.pop()
        found.append(subclass)
        pending.extend(subclass.__subclasses__())
    return found


def checked_value(name: str, value: str) -> tuple[str, str | None]:
    """One value of filter ``name`` (``vm_uuid``, ``owner_uuid``, ``server_uuid``, ``type``
    or ``state``) as filters compare it, and why it is refused (None: it is not). The same
    rules for ``GET /changes`` and ``vmledger changes``: a filter no change could match would
    look like a quiet log."""
    if name in UUID_FILTERS:
        try:
            return str(uuidlib.UUID(value)), None
        except ValueError:
            return value, "Invalid UUID"
    allowed = event_types() if name == "type" else STATES
    return value, None if value in allowed else f"unknown value {value[:64]!r}"


def listed_values(raw: str) -> tuple[list[str], str | None]:
    """The comma-separated values of ``raw`` (each stripped), and why the list is refused
    (None: it is not): an empty list, or an empty element (``Stopped,,Started``,
    ``Stopped,``), which is a malformed list, not one value fewer (they were dropped while
    ``type=`` was refused: console tester). The same rule for ``GET /changes`` and
    ``vmledger changes``."""
    values = [value.strip() for value in raw.split(",")]
    if not any(values):
        return [], "must name at least one value"
    for index, value in enumerate(values, start=1):
        if not value:
            return values, f"an empty value in the list (element {index})"
    return values, None


@dataclass(frozen=True)
class ChangeFilter:
    """A stream's filters (``None``: any). ``vm_uuids``, ``types`` and ``states`` match any of
    their values; ``owner_uuid``, ``server_uuid`` and ``state`` compare with the resource's
    after the event. ``scope_owner`` is an owner token's own owner: its streams show only
    changes of VMs that owner holds after the event (``domain.visibility.owner_sees``: so not
    a VM's events while it is in the operator quarantine), whatever the other filters say."""

    vm_uuids: frozenset[str] | None = None
    owner_uuid: str | None = None
    server_uuid: str | None = None
    types: frozenset[str] | None = None
    states: frozenset[str] | None = None
    scope_owner: str | None = None

    def matches(self, change: Change) -> bool:
        """Whether ``change`` is shown."""
        if self.scope_owner is not None and (
                change.kind != "vm" or not owner_sees(change.owner_uuid, self.scope_owner)):
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
