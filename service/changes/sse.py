"""Server-Sent Events framing of a change stream (the WHATWG ``text/event-stream`` format)."""

from __future__ import annotations

import json

from service.changes.hub import StreamEnd
from service.changes.records import Change

# How long an EventSource waits before it reconnects after the stream ends (ms).
RETRY_MS = 1000
OPENING = f"retry: {RETRY_MS}\n: vmledger changes\n\n".encode()
HEARTBEAT = b": heartbeat\n\n"


def frame(item: Change | StreamEnd | None) -> bytes:
    """One SSE frame: a change (``id`` = its log position, ``event`` = its type), the final
    ``cut`` event of a stream the service ended (``id`` = the position to resume after), or
    a heartbeat comment for ``None``."""
    if item is None:
        return HEARTBEAT
    if isinstance(item, StreamEnd):
        data = json.dumps({"reason": item.reason, "resume_after": item.resume_after})
        return f"id: {item.resume_after}\nevent: cut\ndata: {data}\n\n".encode()
    return f"id: {item.position}\nevent: {item.type}\ndata: {item.data}\n\n".encode()
