"""Time travel: GetVm ``?version=N`` and ``?at=RFC3339`` answer the VM as it was, folded from
its stream, not read from a read model (docs/architecture.md, "Read-your-writes")."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from domain.errors import DamagedStreamError, StreamGapError, VmNotFoundError
from domain.json_input import cut
from domain.visibility import owner_sees
from projections.formats import INSTANT_EXPECTED, GivenInstant, parse_given_instant
from projections.vm_view import render_vm
from service.api.params import Query
from service.audit.history import vm_event_times


def instant(query: Query, name: str) -> GivenInstant | None:
    """The RFC 3339 ``date-time`` of query parameter ``name`` as the client gave it
    (``parse_given_instant``: with its time zone, and how many fraction digits it has), or
    None when it is absent; a malformed one, or one UTC cannot write, is noted on ``query``
    as invalid (refused by its ``check``)."""
    value = query.params.get(name)
    if value is None:
        return None
    moment = parse_given_instant(value)
    if moment is None:
        query.invalid(name, INSTANT_EXPECTED)
    return moment


def version_or_instant(query: Query) -> tuple[int | None, GivenInstant | None]:
    """``(version, at)`` of the query's ``?version=`` and ``?at=``, each None when absent.
    Raises the ``ValidationFailed`` error for a malformed one (``query.check``) and
    ``ConflictingParameters`` for both together: the one would silently win over the other
    (GetVm and the console's VM state alike)."""
    version = query.integer("version", minimum=1)
    at = instant(query, "at")
    query.check()
    if version is not None and at is not None:
        raise query.conflicting("version", "at", refused="at")
    return version, at


def owned_now(services: Any, vm_uuid: str, owner_uuid: str | None) -> Any:
    """The VM aggregate now, if a caller scoped to ``owner_uuid`` (None: not scoped) may read
    its past: only while the VM is its own now (``domain.visibility``; a quarantined VM's
    history and versions are 404 to its owner). Raises ``VmNotFoundError``."""
    vm = services.commands.load(vm_uuid)
    if owner_uuid is not None and not owner_sees(vm.owner_uuid, owner_uuid):
        raise VmNotFoundError(vm_uuid)
    return vm


def as_it_was(services: Any, vm_uuid: str, version: int | None,
              at: GivenInstant | None, *, owner_uuid: str | None = None,
              current: Any = None) -> dict[str, Any]:
    """The VM object as it was at ``version``, or at instant ``at`` (its last event then),
    folded from its stream (GetVm ``?version=`` and ``?at=``). Raises ``VmNotFoundError``
    when there was no such version, or no VM yet at that instant, or (for a caller scoped to
    ``owner_uuid``) the VM was not that owner's then (``domain.visibility``), as its
    history leaves that version out. ``current``: the VM aggregate now, if the caller
    already loaded it (``owned_now``); without it the stream's last stored event bounds the
    versions, so that a stream damaged after ``version`` (or ``at``) still answers it, its
    fold not crossing the damage (docs/operations.md, "A damaged stream"). Raises the
    stream's ``DamagedStreamError`` when that fold does cross it."""
    head = current.version if current is not None else _stored_head(services, vm_uuid)
    if version is None:
        assert at is not None
        version = _version_at(services, vm_uuid, at, head)
    if version > head:
        raise VmNotFoundError(vm_uuid, f" at version {version} (current version is {head})")
    vm = services.commands.load(vm_uuid, version=version)
    if owner_uuid is not None and not owner_sees(vm.owner_uuid, owner_uuid):
        raise VmNotFoundError(vm_uuid, f" at version {version}")
    return render_vm(vm)


def _stored_head(services: Any, vm_uuid: str) -> int:
    """The version of the stream's last stored event, read without folding (or decoding)
    any. Raises ``VmNotFoundError`` when it has none; another kind's stream is found so by
    the load of its version (``Commands.load``)."""
    try:
        stream = UUID(vm_uuid)
    except ValueError:
        raise VmNotFoundError(vm_uuid) from None
    last = services.commands.app.recorder.select_events(stream, desc=True, limit=1)
    if not last:
        raise VmNotFoundError(vm_uuid)
    return int(last[0].originator_version)


def _version_at(services: Any, vm_uuid: str, at: GivenInstant, head: int) -> int:
    """The VM's version at instant ``at``: its last event then. A stream whose history is
    damaged (a gap, an event that cannot be read) answers it only when an event before the
    damage is already later than ``at``; else the version may be past it, and its
    ``DamagedStreamError`` is raised. Raises ``VmNotFoundError`` when the VM did not exist
    at ``at``."""
    try:
        events, damage = vm_event_times(services.commands, vm_uuid, limit=head), None
    except DamagedStreamError as error:
        damage = error
        # the stream's events before the damage: a page of that many follows from the first
        sound = error.previous if isinstance(error, StreamGapError) else error.version - 1
        events = vm_event_times(services.commands, vm_uuid, limit=sound) if sound else []
    # an instant given to the millisecond, as the API writes them (a timestamp copied from
    # the history), names every event of that millisecond; one given finer is compared to
    # each event's stored timestamp, to the microsecond (a tester: .2304Z answered the VM
    # after an event stored at .230460). Finer is decided by the digits given, not by the
    # value (a tester: .338000Z named an event stored at .338626)
    moment = at.moment
    earlier = [version for version, timestamp in events
               if (timestamp if at.fine else _to_the_ms(timestamp)) <= moment]
    if damage is not None and len(earlier) == len(events):
        raise damage
    if not earlier:
        raise VmNotFoundError(vm_uuid, f" (it did not exist at {cut(at)})")
    return int(earlier[-1])


def _to_the_ms(moment: datetime) -> datetime:
    """``moment`` floored to its millisecond, as ``rfc3339`` writes it."""
    return moment.replace(microsecond=moment.microsecond - moment.microsecond % 1000)
