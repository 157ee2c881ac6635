"""The hash chain of a stream: tamper evidence for auditors (design.md, "Auditing").

Every event carries ``chain`` = SHA-256 over the previous event's ``chain`` and the event's
own content, as it was written. Editing a stored event, or removing one that has a successor,
breaks the chain at that event (or at the one after it), which ``vmledger audit verify``
names by stream and version. Removing a stream's last events (or the whole stream) leaves a
shorter chain that still holds: only a record of the head kept elsewhere would show it.
``class_version`` and ``originator_topic`` are outside the hashed content (docs/operations.md
says what the audit finds of their edits).
The content is hashed as stored, before any upcasting, so upcast old events still verify.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from eventsourcing.domain import AggregateCreated, OriginatorVersionError

from domain.compact_json import reused_encoder
from domain.errors import StreamGapError

GENESIS = "0" * 64

# Not part of the hashed content: the hash itself, the schema version the mapper adds, and the
# aggregate's topic that eventsourcing stores on created events (implied by the event topic).
EXCLUDED = frozenset({"chain", "class_version", "originator_topic"})


def link(previous: str, originator_id: UUID, version: int, topic: str,
         fields: Mapping[str, Any]) -> str:
    """The chain value of an event: SHA-256 hex over the previous value, the stream, the
    version, the event topic and the event's fields (canonical JSON, sorted keys)."""
    canonical = _canonical_json([previous, str(originator_id), version, topic, _content(fields)])
    return hashlib.sha256(canonical.encode()).hexdigest()


def linked_content(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The content ``link`` hashes of an event's stored ``fields``, as the JSON values its
    hashed text holds: a date as ``str(datetime)`` (``2026-12-06 16:56:49.868260+00:00``, no
    fraction when it has no microseconds), a UUID as its text. With the previous chain, the
    stream, the version and the topic, it is every input of the link: the history shows it
    so that an auditor recomputes each link (docs/api.md, "Recomputing a link")."""
    return json.loads(_canonical_json(_content(fields)))


def _content(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k not in EXCLUDED}


def _json_dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


# one C encoder for every link: the replay links a hundred thousand events a minute
_canonical_json = reused_encoder(str, ensure_ascii=True, sort_keys=True) or _json_dumps


class ChainedEvent:
    """Mixin of an aggregate's base ``Event`` (which must declare ``chain: str``): applying
    an event moves the aggregate's ``chain_head`` to it."""

    chain: str
    originator_id: UUID
    originator_version: int

    def mutate(self, aggregate: Any) -> Any:
        """The aggregate with this event applied. Raises ``StreamGapError`` when the event
        does not follow the aggregate's version, or follows none (a stream whose first events
        are missing, which the library only asserts): every fold of every stream (a load, a
        read model's, the audit's) comes here, so this is the one place the library's
        ``OriginatorVersionError``, which names no stream, is translated."""
        if aggregate is None and not isinstance(self, AggregateCreated):  # its first is lost
            raise StreamGapError(self.originator_id, self.originator_version, 0)
        try:
            mutated = super().mutate(aggregate)  # type: ignore[misc]
        except OriginatorVersionError:
            raise StreamGapError(self.originator_id, self.originator_version,
                                 aggregate.version) from None
        mutated.chain_head = self.chain
        return mutated


class Chained:
    """Mixin of an aggregate: every event it records links to the one before it."""

    chain_head: str
    INITIAL_VERSION: int
    id: Any
    version: int

    @classmethod
    def _create(cls, event_class: Any, *, id: UUID, **kwargs: Any) -> Any:
        kwargs.setdefault("timestamp", event_class.create_timestamp())
        kwargs["chain"] = link(GENESIS, id, cls.INITIAL_VERSION, event_class.TOPIC, kwargs)
        return super()._create(event_class, id=id, **kwargs)  # type: ignore[misc]

    def trigger_event(self, event_class: Any, **kwargs: Any) -> None:
        kwargs.setdefault("timestamp", event_class.create_timestamp())
        kwargs["chain"] = link(self.chain_head, self.id, self.version + 1, event_class.TOPIC,
                               kwargs)
        super().trigger_event(event_class, **kwargs)  # type: ignore[misc]
