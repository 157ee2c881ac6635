"""The hash chain of a stream: tamper evidence for auditors (design.md, "Auditing").

Every event carries ``chain`` = SHA-256 over the previous event's ``chain`` and the event's
own content, as it was written. Editing or removing a stored event breaks the chain at that
event (or at the one after it), which ``vmledger audit verify`` names by stream and version.
The content is hashed as stored, before any upcasting, so upcast old events still verify.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any
from uuid import UUID

GENESIS = "0" * 64

# Not part of the hashed content: the hash itself, the schema version the mapper adds, and the
# aggregate's topic that eventsourcing stores on created events (implied by the event topic).
EXCLUDED = frozenset({"chain", "class_version", "originator_topic"})


def link(previous: str, originator_id: UUID, version: int, topic: str,
         fields: Mapping[str, Any]) -> str:
    """The chain value of an event: SHA-256 hex over the previous value, the stream, the
    version, the event topic and the event's fields (canonical JSON, sorted keys)."""
    content = {k: v for k, v in fields.items() if k not in EXCLUDED}
    canonical = json.dumps(
        [previous, str(originator_id), version, topic, content],
        sort_keys=True, separators=(",", ":"), default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()
