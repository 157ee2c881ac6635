"""The uvicorn server of ``vmledger serve`` (one process, or each of ``--workers N``): uvicorn's
own, except that on shutdown the app first ends its change streams itself.

uvicorn's shutdown closes every open WebSocket with code 1012 and no reason as soon as it
stops listening, and only tells the app (the lifespan's shutdown) once every connection is
done: too late for a changefeed listener to be told where to resume. So before uvicorn's
shutdown this server stops listening and awaits the hook the app's lifespan put in its state
under ``BEFORE_SHUTDOWN``, which ends every stream with its position (docs/api.md, "Triton's
changefeed"; docs/operations.md, "Stopping processes").
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

import uvicorn

log = logging.getLogger(f"vmledger.{__name__}")
BEFORE_SHUTDOWN = "vmledger.before_shutdown"
STARTUP_FAILURE = 3  # uvicorn.run's exit status when the server did not start
INTERRUPTED = 128 + signal.SIGINT  # a SIGINT's (^C's) exit status, as a shell reports it


class StreamEndingServer(uvicorn.Server):
    """``uvicorn.Server`` that awaits the app's ``BEFORE_SHUTDOWN`` hook, if it has one,
    once it stops listening and before it closes the connections; and calls ``on_started``
    (if given) with the port it listens on once it accepts connections."""

    def __init__(self, config: uvicorn.Config,
                 on_started: Callable[[int], None] | None = None):
        super().__init__(config)
        self.on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's startup, then ``on_started`` with the port (port 0's too)."""
        await super().startup(sockets)
        if self.started and self.on_started is not None and self.servers:
            self.on_started(self.servers[0].sockets[0].getsockname()[1])

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stop listening, let the app end its streams, then uvicorn's shutdown. A forced
        exit (a second SIGINT) skips the app's hook."""
        hook = getattr(getattr(self, "lifespan", None), "state", {}).get(BEFORE_SHUTDOWN)
        if hook is not None and not self.force_exit:
            for server in self.servers:  # no new connection meanwhile (closing is idempotent)
                server.close()
            for sock in sockets or []:
                sock.close()
            await hook()
        await super().shutdown(sockets)


def run(app: str, **options: Any) -> None:
    """``uvicorn.run(app, **options)`` for one process, with ``StreamEndingServer``; logs
    ``listening on http://HOST:PORT with 1 HTTP process`` once it accepts connections, the
    line ``serve --workers N`` logs (operator tester: one process said only uvicorn's)."""
    host = options.get("host", "127.0.0.1")
    server = StreamEndingServer(uvicorn.Config(app, **options), on_started=lambda port: (
        announce_listening(host, port, 1)))
    try:
        server.run()
    except KeyboardInterrupt:
        # uvicorn raises the SIGINT it caught again once its shutdown is done (SIGTERM's
        # default then ends the process: 143 to a shell); this one ends as every command's
        # ^C does, 128 + SIGINT and no traceback (it was suppressed: status 0, a tester)
        sys.exit(INTERRUPTED)
    if not server.started:
        sys.exit(STARTUP_FAILURE)


def announce_listening(host: str, port: int, processes: int) -> None:
    """Log that the service accepts connections on ``host:port`` in ``processes`` HTTP
    processes (docs/operations.md)."""
    shown = f"[{host}]" if ":" in host else host
    log.info("listening on http://%s:%s with %s HTTP process%s", shown, port, processes,
             "" if processes == 1 else "es")
