"""The application's mapper, which turns an event it cannot read into ``UnreadableEventError``
naming the stream and version. Every load (the loader, time travel, history, the changefeed)
decodes stored events here, so the one place covers them all; the library's own errors
(``TopicError``, a decoding error) name neither and answered 500."""

from __future__ import annotations

from typing import Any

from eventsourcing.persistence import Mapper, StoredEvent

from domain.errors import UnreadableEventError


class CheckedMapper(Mapper):
    """``Mapper`` whose ``to_domain_event`` raises ``UnreadableEventError`` for an event whose
    topic resolves to no class or whose state does not decode or upcast."""

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        """The domain event of ``stored_event``, or ``UnreadableEventError``."""
        try:
            return super().to_domain_event(stored_event)
        except Exception as error:  # TopicError, a decode or upcast error: any of them
            reason = f"{type(error).__name__}: {str(error)[:200]}"
            raise UnreadableEventError(stored_event.originator_id,
                                       stored_event.originator_version, reason) from error
