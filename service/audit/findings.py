"""What the audit's checks report (``Difference``), and what they share of a stored event:
its fields as written (``stored_fields``) and whether its class can read it
(``check_class``); and how a ``tampered`` finding words what was edited
(service/audit/chains.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eventsourcing.persistence import Mapper, Notification
from eventsourcing.utils import resolve_topic


@dataclass(frozen=True)
class Difference:
    """One thing that did not hold: where (stream or read-model row, version) and what."""

    where: str
    version: int | None
    kind: str
    detail: str

    def __str__(self) -> str:
        at = f" version {self.version}" if self.version is not None else ""
        return f"{self.kind}: {self.where}{at}: {self.detail}"


class WrongTypeError(ValueError):
    """A stored event's column holds another type than the event store writes; its message
    says which and what (``undecodable`` findings give it alone, with no class name)."""


def stored_fields(mapper: Mapper[Any], stored: Notification) -> dict[str, Any]:
    """An event's fields exactly as they were written: decoded, but not upcast. Raises
    ``ValueError`` saying which column holds the wrong type (``checked_mapper.wrong_type``),
    or the decoder's error."""
    from service.commands.checked_mapper import wrong_type

    if (wrong := wrong_type(stored)) is not None:
        raise WrongTypeError(wrong)
    state = stored.state
    if mapper.cipher:
        state = mapper.cipher.decrypt(state)
    if mapper.compressor:
        state = mapper.compressor.decompress(state)
    return mapper.transcoder.decode(state)


def check_class(where: str, stored: Notification, fields: dict[str, Any]
                 ) -> list[Difference]:
    """An event whose topic names no event class, or whose ``class_version`` is newer than
    its class's: neither is covered by the chain (docs/events.md), and the mapper would read
    the one not at all and the other without upcasting it."""
    try:
        cls = resolve_topic(stored.topic)
    except Exception as error:  # noqa: BLE001 - TopicError, or a topic naming no class
        return [Difference(where, stored.originator_version, "unknown topic",
                           f"{stored.topic!r} names no event class: {error}")]
    stored_version = fields.get("class_version", 1)
    current = getattr(cls, "class_version", 1)
    if not isinstance(stored_version, int) or stored_version > current:
        return [Difference(where, stored.originator_version, "class version",
                           f"class_version {stored_version!r} is newer than {stored.topic}'s "
                           f"({current})")]
    return []


# What a tampered event's finding says, by what the next event of its stream links to
CONTENT = ("the event's content was changed: the event after it links to its chain, which "
           "its content does not make")
CHAIN = ("its chain value was changed: the event after it links to the chain its content "
         "makes")
UNJUDGED = "the event's content or its link to the previous event was changed"


def foreign(version: int, successor: int | None = None) -> str:
    """What an event that links to none of its stream's events is: another stream's, or
    forged (``successor``: the version after it, which cannot be checked against it)."""
    text = (f"it does not link to this stream's version {version - 1} (an event moved from "
            "another stream, or forged)")
    if successor is not None:
        text += f"; version {successor} cannot be checked against it"
    return text
