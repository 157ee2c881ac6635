"""The HTTP protocol ``vmledger serve`` runs uvicorn with: h11's, with ``TCP_NODELAY`` set on
every connection. httptools (cheaper per request) answers HEAD and ``Connection`` differently
from what VMAPI's own curl-head tests expect (6 of 12 failed with it), so it is not used until
``service/api/connection.py`` works with both (docs/performance.md, "A lean HTTP edge").

In multiprocess mode (``serve --workers N``) uvicorn binds the listening socket itself with
``proto`` 0; accepted sockets inherit it, and asyncio, which turns Nagle's algorithm off only
for sockets that say ``IPPROTO_TCP``, leaves it on. Every keep-alive response after the first
then waited for the client's delayed ACK: about 40 ms a request on Linux (uvicorn issue #3149;
found by bench/p1_commands.py, 48 ms a command with two workers against 4 ms with one:
docs/performance.md, P1).
"""

from __future__ import annotations

import asyncio
import socket

from uvicorn.protocols.http.h11_impl import H11Protocol


class _NoDelay:
    """Turns Nagle's algorithm off on each TCP connection, then lets the protocol start."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)  # type: ignore[misc]


class NoDelayH11Protocol(_NoDelay, H11Protocol):
    """uvicorn's h11 protocol with ``TCP_NODELAY``."""
