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

import contextlib
import socket
import sys
from typing import Any

import uvicorn

BEFORE_SHUTDOWN = "vmledger.before_shutdown"
STARTUP_FAILURE = 3  # uvicorn.run's exit status when the server did not start


class StreamEndingServer(uvicorn.Server):
    """``uvicorn.Server`` that awaits the app's ``BEFORE_SHUTDOWN`` hook, if it has one,
    once it stops listening and before it closes the connections."""

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
    """``uvicorn.run(app, **options)`` for one process, with ``StreamEndingServer``."""
    server = StreamEndingServer(uvicorn.Config(app, **options))
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)
