"""A VM's history as auditors read it: every event with its version, global position,
timestamp, type, data and cause (design.md, "Auditing")."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from domain.errors import VmNotFoundError
from projections.formats import rfc3339
from service.commands.application import Commands
from service.storage import select_stream

_ENVELOPE = {"originator_id", "originator_version", "timestamp", "cause", "originator_topic"}


def vm_history(
    commands: Commands, vm_uuid: str, *, after_version: int = 0, limit: int = 1000
) -> list[dict[str, Any]]:
    """Up to ``limit`` events of the VM's stream after ``after_version``, oldest first.

    Raises ``VmNotFoundError`` when the stream has no events at all.
    """
    try:
        vm_id = UUID(vm_uuid)
    except ValueError:
        raise VmNotFoundError(vm_uuid) from None
    app = commands.app
    notifications = select_stream(app.recorder, vm_id, after_version, limit)
    if notifications and not notifications[0].topic.startswith("vm."):
        raise VmNotFoundError(vm_uuid)  # another aggregate's stream (a server's)
    if not notifications and (after_version == 0 or not _exists(commands, vm_id)):
        raise VmNotFoundError(vm_uuid)
    entries = []
    for notification in notifications:
        event = app.mapper.to_domain_event(notification)
        data = {k: _plain(v) for k, v in vars(event).items() if k not in _ENVELOPE}
        entries.append(
            {
                "version": event.originator_version,
                "position": notification.id,
                "timestamp": rfc3339(event.timestamp),
                "type": type(event).__name__,
                "data": data,
                "cause": getattr(event, "cause", None),
            }
        )
    return entries


def _exists(commands: Commands, vm_id: UUID) -> bool:
    return bool(select_stream(commands.app.recorder, vm_id, 0, 1))


def _plain(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return rfc3339(value)
    if isinstance(value, UUID):
        return str(value)
    return value
