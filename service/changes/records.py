"""Each log event told as a change: what changed, on which resource, and the resource's owner,
server and state after it, folded from the log itself (never from a read model, which may lag
or have been rebuilt: an owner's scope must hold for every position, ever)."""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification

from domain.errors import DamagedStreamError
from domain.folding import apply_stored
from projections.formats import epoch_ms, rfc3339
from service.commands.aggregate_cache import fold_before

# The fields of a VM whose change Triton's changefeed names in ``subResources`` (VMAPI's
# changefeed configuration), and the aggregate attribute holding each one as the VM object
# shows it (``server_uuid``: a provisioning VM's claimed server too).
VM_SUB_RESOURCES: dict[str, str] = {
    "alias": "alias",
    "customer_metadata": "customer_metadata",
    "destroyed": "destroyed_at",
    "internal_metadata": "internal_metadata",
    "nics": "nics",
    "owner_uuid": "owner_uuid",
    "server_uuid": "shown_server_uuid",
    "state": "state",
    "tags": "tags",
}
# The type of the change told of an event whose stream cannot be folded to it (api.md,
# "Changes"): lowercase, like the ``cut`` event, so no event class can have it.
DAMAGED = "damaged"
# Envelope fields of a stored event, which a change carries under their own names.
_ENVELOPE = {"originator_id", "originator_version", "timestamp", "cause", "originator_topic",
             "chain"}


@dataclass(frozen=True)
class Change:
    """One log event as a change.

    ``kind`` is the aggregate's topic (``vm``, ``server``, ``volume``, ...), ``uuid`` its id;
    ``owner_uuid``, ``server_uuid`` and ``state`` are the resource's after the event (``None``
    where it has none); ``changed`` names the VMAPI fields the event changed
    (``VM_SUB_RESOURCES`` keys, empty for other kinds); ``data`` is the JSON text of the SSE
    ``data:`` object (api.md, "Changes"); ``at_ms`` is when the event was recorded (its
    timestamp), in milliseconds since the Unix epoch (``None`` for a damaged change, whose
    event cannot be read)."""

    position: int
    kind: str
    uuid: str
    type: str
    version: int
    owner_uuid: str | None
    server_uuid: str | None
    state: str | None
    changed: tuple[str, ...]
    data: str
    at_ms: int | None = None


def _plain(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return rfc3339(value)
    if isinstance(value, UUID):
        return str(value)
    if hasattr(value, "value") and isinstance(value.value, str):
        return value.value  # an enum such as VmState
    return value


def _facts(kind: str, aggregate: Any) -> dict[str, Any]:
    """What a change reports of the resource after an event (copied: later events mutate the
    aggregate in place)."""
    state = getattr(aggregate, "state", None)
    if state is None:
        state = getattr(aggregate, "status", None)  # a server's
    facts = {"state": _plain(state), "owner_uuid": getattr(aggregate, "owner_uuid", None),
             "server_uuid": getattr(aggregate, "server_uuid", None)}
    if kind == "server":
        facts["server_uuid"] = str(aggregate.id)
    if kind == "vm":
        # the VM object's server (a provisioning VM's claimed one: Vm.shown_server_uuid), so
        # a change's server and a ``server_uuid`` filter agree with GetVm and ListVms
        facts["server_uuid"] = getattr(aggregate, "shown_server_uuid", None)
        for name, attribute in VM_SUB_RESOURCES.items():
            facts.setdefault(name, copy.deepcopy(getattr(aggregate, attribute, None)))
    return facts


class ChangeFolder:
    """Turns notifications into ``Change``s, folding each resource forward from the log.

    Keeps up to ``cache_size`` aggregates (least recently changed dropped); a resource not kept
    at the version before an event is loaded from the log at that event's version (snapshots
    make that short). Not thread-safe: one folder per reading task."""

    def __init__(self, app: Any, cache_size: int = 10_000):
        self.app = app
        self.cache_size = cache_size
        self._aggregates: OrderedDict[UUID, Any] = OrderedDict()

    def fold(self, notifications: Sequence[Notification]) -> list[Change]:
        """The changes of ``notifications`` (in log order), one each."""
        return [self._change(n) for n in notifications]

    def _change(self, notification: Notification) -> Change:
        """The change of ``notification``; a ``damaged`` one when its stream cannot be folded
        to it (a gap, an event that cannot be read or applied: ``domain.folding`` makes
        whatever applying a stored event raises a ``DamagedStreamError``): one damaged stream
        must not stop every stream's changes."""
        try:
            return self._folded_change(notification)
        except DamagedStreamError as error:
            self._aggregates.pop(notification.originator_id, None)
            return _damaged(notification, _stream_kind(self.app, notification), error)

    def _folded_change(self, notification: Notification) -> Change:
        event = self.app.mapper.to_domain_event(notification)
        kind = notification.topic.split(".", 1)[0]
        resource_id = event.originator_id
        version = event.originator_version
        previous = self._aggregates.pop(resource_id, None)
        if previous is not None and previous.version == version - 1:
            before = _facts(kind, previous)
            aggregate = apply_stored(event, previous)
        elif version == 1:
            before = {}
            aggregate = apply_stored(event, None)
        else:
            previous = fold_before(self.app, resource_id, version)
            before = _facts(kind, previous)
            aggregate = apply_stored(event, previous)
        self._aggregates[resource_id] = aggregate
        while len(self._aggregates) > self.cache_size:
            self._aggregates.popitem(last=False)
        after = _facts(kind, aggregate)
        changed = tuple(name for name in VM_SUB_RESOURCES
                        if kind == "vm" and after.get(name) != before.get(name, None)
                        and not (version == 1 and after.get(name) in (None, {}, [])))
        body: dict[str, Any] = {
            "position": notification.id,
            f"{kind}_uuid": str(resource_id),
            "version": version,
            "type": type(event).__name__,
            "timestamp": rfc3339(event.timestamp),
        }
        if kind == "vm":
            body["owner_uuid"] = after["owner_uuid"]
            body["server_uuid"] = after["server_uuid"]
        if after["state"] != before.get("state"):
            body["state"] = after["state"]
        body["cause"] = getattr(event, "cause", None)
        body["data"] = {k: _plain(v) for k, v in vars(event).items() if k not in _ENVELOPE}
        return Change(
            position=notification.id, kind=kind, uuid=str(resource_id), type=body["type"],
            version=version, owner_uuid=after["owner_uuid"], server_uuid=after["server_uuid"],
            state=after["state"], changed=changed,
            data=json.dumps(body, default=_plain, separators=(",", ":")),
            at_ms=epoch_ms(event.timestamp),
        )


def _stream_kind(app: Any, notification: Notification) -> str:
    """The kind of resource (``vm``, ``server``, ...) whose stream holds ``notification``: its
    topic's first word, unless the topic is a class's path (``module:Class``, as no event of
    the service's is named: edited behind its back), then that of the stream's first event
    still stored, which names the stream's kind unless it was edited too."""
    topic = notification.topic
    if ":" in topic:
        first = app.recorder.select_events(notification.originator_id, limit=1)
        topic = first[0].topic if first else topic
    return topic.split(".", 1)[0]


def _damaged(notification: Notification, kind: str, error: DamagedStreamError) -> Change:
    """The change told of an event whose stream (of resources of ``kind``) cannot be folded
    to it: its position, resource and version, and why (the fold's words); no owner, server
    or state, so only a stream that filters on none of them shows it (api.md, "Changes")."""
    uuid = str(notification.originator_id)
    body = {"position": notification.id, f"{kind}_uuid": uuid,
            "version": notification.originator_version, "type": DAMAGED,
            "error": f"{error}; the log needs repair"}
    return Change(position=notification.id, kind=kind, uuid=uuid, type=DAMAGED,
                  version=notification.originator_version, owner_uuid=None, server_uuid=None,
                  state=None, changed=(), data=json.dumps(body, separators=(",", ":")))
