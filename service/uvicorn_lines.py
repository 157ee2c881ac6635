"""uvicorn's lines of each connection, left out where the long-running processes set up their
logging (``service.logs.logging_config``), and no URL's query nor credential in any of its
lines let through (docs/operations.md, "Logs").

uvicorn logs every WebSocket upgrade itself, through ``uvicorn.error`` at INFO, with the whole
URL: ``127.0.0.1:54558 - "WebSocket /changefeeds?token=…" [accepted]`` (``… 401`` and
``… 403`` for a refused one). The websockets library it speaks the protocol with logs to the
same logger: a line as each connection opens, is refused and closes, and at DEBUG a trace of
the handshake, the request line with its query and every header, ``Authorization`` included.
A Triton listener sends its token in the URL (``?token=``, the only way the npm Listener has),
so each upgrade wrote the token into the log in clear (a tester). The upgrade has its one
``vmledger.access`` line instead, path only, as every HTTP request has (service/api/envelope.py).
"""

from __future__ import annotations

import logging
import re

# uvicorn's line of each upgrade (its three WebSocket protocols word it the same), and
# websockets' of each connection: the access line says all they said, bar the query
_CONNECTION_LINES = frozenset((
    "connection open", "connection rejected (%d %s)", "HTTP response sent (%d %s)",
    "connection closed"))
_UPGRADE_LINE = '%s - "WebSocket %s"'

# A URL's query: after a path (``/changefeeds?…``, ``ws://host/changefeeds?…``), up to the
# next space or quote
_QUERY = re.compile(r'(/[^\s?"]*)\?[^\s"]*')
# A credential header's value, to the end of the line (websockets' trace: ``< Authorization:
# Bearer …``), and a bearer token wherever it is said. ``Sec-WebSocket-Protocol`` too: some
# WebSocket clients carry their token there, browsers having no other header to set (a tester)
_CREDENTIAL_HEADER = re.compile(
    r"\b((?:proxy-)?authorization|(?:set-)?cookie|sec-websocket-protocol):.*", re.IGNORECASE)
_BEARER = re.compile(r"\b(bearer)\s+(?!realm=)\S+", re.IGNORECASE)  # not a challenge
MASK = "***"


def without_secrets(text: str) -> str:
    """``text`` with every URL's query (``/changefeeds?***``), credential header's value
    (``Authorization: ***``, ``Cookie: ***``) and bearer token (``Bearer ***``) masked."""
    if "?" in text:
        text = _QUERY.sub(rf"\1?{MASK}", text)
    text = _CREDENTIAL_HEADER.sub(rf"\1: {MASK}", text)
    return _BEARER.sub(rf"\1 {MASK}", text)


class ConnectionLines(logging.Filter):
    """A ``logging.Filter`` for uvicorn's loggers: drops uvicorn's line of each WebSocket
    upgrade and websockets' of each connection (the envelope's ``vmledger.access`` line
    replaces them), and lets every other record through with ``without_secrets`` applied to
    its message. Only on the loggers it is added to (``uvicorn``, ``uvicorn.error``,
    ``uvicorn.access``): a logger's filters see the records logged to it, not to its
    children."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a line of one connection; else True, ``record`` made safe to write."""
        msg = record.msg
        if isinstance(msg, str) and (msg in _CONNECTION_LINES or msg.startswith(_UPGRADE_LINE)):
            return False
        message = record.getMessage()
        shown = without_secrets(message)
        if shown != message:
            record.msg, record.args = shown, ()
        return True


_PROCESS_FILTER = ConnectionLines()


def process_connection_lines() -> ConnectionLines:
    """This process's one ``ConnectionLines`` (the ``()`` factory of ``logging_config``'s
    filter): configuring the logging again (each test, or uvicorn in a ``serve`` process)
    adds the same filter, which a logger does not hold twice."""
    return _PROCESS_FILTER
