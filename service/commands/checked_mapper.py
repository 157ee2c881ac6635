"""The application's mapper, which turns an event it cannot read into ``UnreadableEventError``
naming the stream and version. Every load (the loader, time travel, history, the changefeed)
decodes stored events here, so the one place covers them all; the library's own errors
(``TopicError``, a decoding error) name neither and answered 500.

A row whose columns hold the wrong type (SQLite keeps whatever a plain edit writes: a
``replace()`` on the state, even ``cast(state as text)`` with no change of content, stores
text where the event store writes bytes) is unreadable too, and ``wrong_type`` says so in
those words, for the mapper and the audit alike: it answered 500, or a traceback ``string
argument without an encoding`` (auditor tester)."""

from __future__ import annotations

from typing import Any

from eventsourcing.persistence import Mapper, StoredEvent

from domain.errors import UnreadableEventError


class CheckedMapper(Mapper):
    """``Mapper`` whose ``to_domain_event`` raises ``UnreadableEventError`` for an event whose
    topic resolves to no class or whose state does not decode or upcast."""

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        """The domain event of ``stored_event``, or ``UnreadableEventError``."""
        if (wrong := wrong_type(stored_event)) is not None:
            raise UnreadableEventError(stored_event.originator_id,
                                       stored_event.originator_version, wrong)
        try:
            return super().to_domain_event(stored_event)
        except Exception as error:  # TopicError, a decode or upcast error: any of them
            reason = f"{type(error).__name__}: {str(error)[:200]}"
            raise UnreadableEventError(stored_event.originator_id,
                                       stored_event.originator_version, reason) from error


# What each column of a stored event holds, as the event store writes it
_TYPES = (("state", bytes, "bytes"), ("topic", str, "text"),
          ("originator_version", int, "an integer"))


def wrong_type(stored_event: Any) -> str | None:
    """What is wrong with ``stored_event``'s columns, when one holds another type than the
    event store writes (its state text rather than bytes: ``its state is stored as text, not
    bytes; the row was edited behind the service's back``), or None."""
    for column, kind, named in _TYPES:
        value = getattr(stored_event, column)
        if not isinstance(value, kind) or isinstance(value, bool):
            held = "text" if isinstance(value, str) else (
                "bytes" if isinstance(value, bytes | memoryview) else type(value).__name__)
            return (f"its {column.removeprefix('originator_')} is stored as {held}, not "
                    f"{named}; the row was edited behind the service's back")
    return None
