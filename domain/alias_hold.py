"""Per-owner alias uniqueness (VMAPI's ``validateUniqueAlias``, sdc-vmapi
lib/common/validation.js, which CreateVm and UpdateVm run): no two active VMs of one owner
have one alias. Active is every state but ``destroyed`` and ``failed``.

Which VM holds which alias is recorded on a small stream per owner and alias, the
``AliasHold`` aggregate (its uuid: ``hold_id``), appended in the same transaction as the VM's
events that take or give up the alias, so two writers taking one alias at once conflict on
the hold's version (optimistic concurrency): one is saved, the other decides again on the
hold as the first left it and is refused.

What a VM holds is ``held_aliases``: its alias while it is active, and the alias each of its
active ``update`` jobs sets, from the request on (VMAPI refuses an update to a taken alias when
it is asked, not when its job runs) until the job ends. A hold is taken in two ways:

- ``reserve``: a client's request (CreateVm's ``alias``, UpdateVm's) asks for it; refused
  (``DuplicateAliasError``) when another VM holds it;
- ``adopt``: a fact the log records whatever else holds the alias (a VM an agent found, a
  failed VM started again, a VM that had the alias before holds were recorded); never
  refused, so a hold may name more than one VM. A quarantined VM keeps what it holds for
  its owner: the quarantine takes and gives back no alias.
"""

from __future__ import annotations

import json
from uuid import UUID, uuid5

from eventsourcing.domain import Aggregate

from domain import chain
from domain.derived_ids import derived_id
from domain.errors import DomainError, ValidationError
from domain.events import Cause, DomainEvent
from domain.states import JobName, VmState
from domain.vm import Vm

# The namespace of the holds' uuids (``hold_id``).
ALIAS_HOLD_NAMESPACE = uuid5(UUID(int=0), "vmledger:alias-hold")

# The states in which a VM's alias is free for another VM of its owner (VMAPI's "active"
# VMs are the others).
INACTIVE_STATES = frozenset({VmState.DESTROYED, VmState.FAILED})

# A hold's key: (owner uuid, alias).
HoldKey = tuple[str, str]


class DuplicateAliasError(ValidationError):
    """Another active VM of the owner has (or is being given, by an update) this alias
    (VMAPI's ``validateUniqueAlias``: ``ValidationFailed``, field ``alias``, ``Duplicate``,
    "Already exists for this owner_uuid")."""

    def __init__(self, alias: str):
        super().__init__("alias", "Duplicate", "Already exists for this owner_uuid")
        self.alias = alias
        self.summary = f"alias {alias} already exists for this owner_uuid"


class AliasHoldNotFoundError(DomainError):
    """No hold of that alias was ever made (no VM of the owner took it since holds are
    recorded)."""

    def __init__(self, uuid: UUID | str):
        super().__init__(f"alias hold {uuid} not found")


def hold_id(owner_uuid: str, alias: str) -> UUID:
    """The uuid of the hold of ``alias`` for ``owner_uuid``: the same in every process, so
    every writer taking that alias appends to the one stream; marked, so no client's
    resource can take it (``domain.derived_ids``)."""
    return derived_id(ALIAS_HOLD_NAMESPACE, json.dumps([owner_uuid, alias]))


def held_aliases(vm: Vm) -> frozenset[HoldKey]:
    """The ``(owner uuid, alias)`` pairs ``vm`` holds: its alias unless
    it is destroyed or failed, and the alias of each of its active ``update`` jobs (a string
    ``args.alias``; null clears the alias and holds nothing). A quarantined VM holds what it
    will be given back with: its owner's, by the state it had."""
    owner, state = vm.owner_uuid, VmState(vm.state)
    if state is VmState.QUARANTINED and vm.quarantine:
        owner = vm.quarantine["previous_owner_uuid"]
        state = VmState(vm.quarantine["previous_state"])
    held = set()
    if vm.alias and state not in INACTIVE_STATES:
        held.add((owner, vm.alias))
    for job in vm.active_jobs:
        if job["name"] == JobName.UPDATE:
            alias = (job.get("params") or {}).get("args", {}).get("alias")
            if isinstance(alias, str) and alias:
                held.add((owner, alias))
    return frozenset(held)


def asked_aliases(vm: Vm) -> frozenset[HoldKey]:
    """The pairs of ``held_aliases`` that ``vm``'s pending events ask for on a client's
    request (its creation by CreateVm; an ``update`` job queued): the ones ``reserve`` takes
    and may refuse. A VM found by its agent (``Discovered``) asks for none."""
    asked = set()
    for event in vm.pending_events:
        if isinstance(event, Vm.Created) and not isinstance(event, Vm.Discovered):
            if event.alias:
                asked.add(event.alias)
        elif isinstance(event, Vm.JobQueued) and event.name == JobName.UPDATE:
            alias = (event.params or {}).get("args", {}).get("alias")
            if isinstance(alias, str) and alias:
                asked.add(alias)
    return frozenset(key for key in held_aliases(vm) if key[1] in asked)


class AliasHold(chain.Chained, Aggregate):
    """The VMs that hold ``alias`` for ``owner_uuid`` (``holders``, in the order they took
    it; more than one only where facts put them there: ``adopt``)."""

    TOPIC = "alias_hold"

    class Event(DomainEvent):
        """Base of every alias hold event (its cause and chain link are ``DomainEvent``'s)."""

        TOPIC = "alias_hold.event"

    class Opened(Event, Aggregate.Created):
        """The first hold of ``alias`` for ``owner_uuid``; no VM holds it yet."""

        TOPIC = "alias_hold.opened"
        owner_uuid: str
        alias: str

        def apply(self, hold: AliasHold) -> None:
            hold.owner_uuid = self.owner_uuid
            hold.alias = self.alias
            hold.holders = []

    class AliasReserved(Event):
        """VM ``vm_uuid`` took the alias, at a client's request; no other VM held it."""

        TOPIC = "alias_hold.reserved"
        vm_uuid: str

        def apply(self, hold: AliasHold) -> None:
            hold.holders.append(self.vm_uuid)

    class AliasAdopted(Event):
        """VM ``vm_uuid`` holds the alias as a fact (found, active again, held from before
        holds were recorded), whoever else holds it."""

        TOPIC = "alias_hold.adopted"
        vm_uuid: str

        def apply(self, hold: AliasHold) -> None:
            hold.holders.append(self.vm_uuid)

    class AliasReleased(Event):
        """VM ``vm_uuid`` no longer holds the alias (destroyed, failed, renamed, or its
        update job ended without renaming it)."""

        TOPIC = "alias_hold.released"
        vm_uuid: str

        def apply(self, hold: AliasHold) -> None:
            hold.holders.remove(self.vm_uuid)

    owner_uuid: str
    alias: str
    holders: list[str]
    chain_head: str

    def __init__(self) -> None:
        """State is set by ``Opened.apply``; open holds with ``AliasHold.create``."""

    @classmethod
    def create(cls, owner_uuid: str, alias: str, *, cause: Cause) -> AliasHold:
        """A new, empty hold of ``alias`` for ``owner_uuid`` (uuid ``hold_id``)."""
        return cls._create(cls.Opened, id=hold_id(owner_uuid, alias), cause=cause,
                           owner_uuid=owner_uuid, alias=alias)

    def reserve(self, vm_uuid: str, *, cause: Cause) -> None:
        """Record that VM ``vm_uuid`` takes the alias at a client's request; nothing if it
        holds it already. Raises ``DuplicateAliasError`` when another VM holds it."""
        if vm_uuid in self.holders:
            return
        if self.holders:
            raise DuplicateAliasError(self.alias)
        self.trigger_event(self.AliasReserved, cause=cause, vm_uuid=vm_uuid)

    def adopt(self, vm_uuid: str, *, cause: Cause) -> None:
        """Record that VM ``vm_uuid`` holds the alias as a fact, whoever else holds it;
        nothing if it holds it already."""
        if vm_uuid not in self.holders:
            self.trigger_event(self.AliasAdopted, cause=cause, vm_uuid=vm_uuid)

    def release(self, vm_uuid: str, *, cause: Cause) -> bool:
        """Record that VM ``vm_uuid`` gives the alias up; False (nothing recorded) when it
        does not hold it (a VM that took its alias before holds were recorded)."""
        if vm_uuid not in self.holders:
            return False
        self.trigger_event(self.AliasReleased, cause=cause, vm_uuid=vm_uuid)
        return True
