"""A VM's history as auditors read it: every event with its version, global position,
timestamp, type, data and cause, and the inputs of its hash-chain link, its topic and the
content hashed (docs/api.md, "Recomputing a link"; design.md, "Auditing"); as an owner reads
it, only the events it may see (``domain.visibility``: not those of the VM's quarantine)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from domain import chain
from domain.errors import MovedEventError, StreamGapError, VmNotFoundError
from domain.folding import apply_stored
from domain.visibility import owner_sees
from domain.vm import Vm
from projections.formats import rfc3339
from service.audit.findings import stored_fields
from service.commands.aggregate_cache import fold_stream
from service.commands.application import Commands
from service.storage import select_stream, select_versions

_ENVELOPE = {"originator_id", "originator_version", "timestamp", "cause", "originator_topic"}


def vm_history(
    commands: Commands, vm_uuid: str, *, after_version: int = 0, limit: int = 1000,
    scope_owner: str | None = None,
) -> list[dict[str, Any]]:
    """Up to ``limit`` events of the VM's stream after ``after_version``, oldest first; with
    ``scope_owner``, up to ``limit`` of those that owner may see (``owner_sees`` of the VM
    folded to each event), so a page is short only at the stream's end.

    Raises ``VmNotFoundError`` when the stream has no events at all, ``StreamGapError`` when
    its stored events skip a version (its first included: a history must not pass over an
    event deleted behind the service's back), ``UnreadableEventError`` for an event that
    cannot be decoded, ``MovedEventError`` for one at a position outside the log.
    """
    app = commands.app
    vm_id, notifications = _page(commands, vm_uuid, after_version, limit)
    if scope_owner is None:
        _follow_each_other(vm_id, notifications, after_version)
        return [_entry(app, n)[1] for n in notifications]
    # below, each event's mutate checks that it follows the fold (ChainedEvent.mutate), and
    # one the fold cannot apply is the stream's damage (domain.folding), not a refusal
    vm = fold_stream(app, vm_id, after_version) if after_version else None
    entries: list[dict[str, Any]] = []
    while notifications:
        for notification in notifications:
            event, entry = _entry(app, notification)
            vm = apply_stored(event, vm)
            if owner_sees(vm.owner_uuid, scope_owner):
                entries.append(entry)
                if len(entries) == limit:
                    return entries
        notifications = select_stream(app.recorder, vm_id, vm.version, limit)
    return entries


def vm_event_times(commands: Commands, vm_uuid: str, *, limit: int) -> list[tuple[int, datetime]]:
    """``(version, timestamp)`` of the VM's first ``limit`` events, oldest first, each
    timestamp as stored: to the microsecond, where the history's text is floored to the
    millisecond (``rfc3339``), so that GetVm's ``?at=`` orders an instant and an event inside
    the same millisecond rightly. Raises as ``vm_history`` does (without an owner)."""
    vm_id, notifications = _page(commands, vm_uuid, 0, limit)
    _follow_each_other(vm_id, notifications, 0)
    events = (commands.app.mapper.to_domain_event(n) for n in notifications)
    return [(event.originator_version, event.timestamp) for event in events]


def _page(commands: Commands, vm_uuid: str, after_version: int, limit: int
          ) -> tuple[UUID, list[Any]]:
    """The stream's id and up to ``limit`` of its stored events after ``after_version``.
    Raises ``VmNotFoundError`` for a malformed uuid, another aggregate's stream, or a stream
    with no events (none after ``after_version`` is an empty page of a VM's)."""
    try:
        vm_id = UUID(vm_uuid)
    except ValueError:
        raise VmNotFoundError(vm_uuid) from None
    notifications = select_stream(commands.app.recorder, vm_id, after_version, limit)
    if notifications and not notifications[0].topic.startswith("vm."):
        raise VmNotFoundError(vm_uuid)  # another aggregate's stream (a server's)
    if not notifications and (after_version == 0 or not _exists(commands, vm_id)):
        raise VmNotFoundError(vm_uuid)
    return vm_id, notifications


def hidden_from_its_owner(commands: Commands, vm_uuid: str, up_to_version: int
                          ) -> list[tuple[int, int]]:
    """The runs ``(first, last)`` of the versions, up to ``up_to_version``, that the VM's
    owner may not see (``domain.visibility``): each quarantine's, from its ``Quarantined`` to
    the version before its ``Released``, or to ``up_to_version`` while it lasts; ascending.

    Read from those two events' versions alone (``storage.select_versions``, no event
    decoded), however long the stream: the VM's owner changes only at them (domain/vm.py), so
    to whoever owns it outside its quarantines every other version is visible, as
    ``vm_history``'s fold with ``scope_owner`` finds it, event by event."""
    marks = select_versions(commands.app.recorder, UUID(vm_uuid),
                            (Vm.Quarantined.TOPIC, Vm.Released.TOPIC), up_to_version)
    runs: list[tuple[int, int]] = []
    since: int | None = None
    for version, topic in marks:
        if topic == Vm.Quarantined.TOPIC:
            since = version if since is None else since
        elif since is not None:
            runs.append((since, version - 1))
            since = None
    if since is not None:
        runs.append((since, up_to_version))
    return runs


def _follow_each_other(vm_id: UUID, notifications: Any, after_version: int) -> None:
    """Raise ``StreamGapError`` at the first of ``notifications`` (a page of the stream read
    after ``after_version``) whose version is not the one before it plus one."""
    previous = after_version
    for notification in notifications:
        if notification.originator_version != previous + 1:
            raise StreamGapError(vm_id, notification.originator_version, previous)
        previous = notification.originator_version


def _entry(app: Any, notification: Any) -> tuple[Any, dict[str, Any]]:
    """The stored event and its history entry. Raises ``MovedEventError`` for an event at a
    position outside the log (0 or below): listed there, it was told at a position that no
    reader of the log by position ever reads (auditor tester), and ``UnreadableEventError``
    for one that cannot be read."""
    if notification.id < 1:
        raise MovedEventError(notification.originator_id, notification.originator_version,
                              notification.id)
    event = app.mapper.to_domain_event(notification)
    data = {k: _plain(v) for k, v in vars(event).items() if k not in _ENVELOPE}
    return event, {
        "version": event.originator_version,
        "position": notification.id,
        "timestamp": rfc3339(event.timestamp),
        "type": type(event).__name__,
        "data": data,
        "cause": getattr(event, "cause", None),
        # what the link hashes, which the fields above show otherwise (the class's name, the
        # time to the millisecond, the fields upcast): an auditor recomputes it from these
        "topic": notification.topic,
        "chained": chain.linked_content(stored_fields(app.mapper, notification)),
    }


def _exists(commands: Commands, vm_id: UUID) -> bool:
    return bool(select_stream(commands.app.recorder, vm_id, 0, 1))


def _plain(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return rfc3339(value)
    if isinstance(value, UUID):
        return str(value)
    return value
