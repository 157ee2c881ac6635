"""A TCP proxy on 127.0.0.1 that a test controls, to put outages between vmledger and its
database: ``refuse()`` (the database is down: new connections refused, live ones reset),
``black_hole()`` (a silent partition: connections accepted and held, nothing forwarded either
way, no RST or FIN ever sent) and ``heal()``.

Threads only, bounded by the connections the test makes; ``close()`` ends them all.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
from contextlib import suppress

OPEN, REFUSE, BLACK_HOLE = "open", "refuse", "black_hole"


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream`` (host, port) while open."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.mode = OPEN
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket | None]] = []
        self._closed = threading.Event()
        self._listener: socket.socket | None = None
        self.port = self._listen(0)

    # -- control -----------------------------------------------------------------------------

    def refuse(self) -> None:
        """The database goes down: the port refuses connections, live ones are reset."""
        with self._lock:
            self.mode = REFUSE
            listener, self._listener = self._listener, None
            pairs, self._pairs = self._pairs, []
        if listener is not None:
            listener.close()
        for pair in pairs:
            for sock in pair:
                if sock is not None:
                    _reset(sock)

    def black_hole(self) -> None:
        """A silent partition: nothing passes either way, nothing is closed."""
        with self._lock:
            self.mode = BLACK_HOLE

    def heal(self) -> None:
        """Traffic flows again (the port listens again after ``refuse``)."""
        with self._lock:
            self.mode = OPEN
            relisten = self._listener is None
        if relisten:
            self._listen(self.port)

    def close(self) -> None:
        """Stop everything."""
        self._closed.set()
        self.refuse()

    # -- plumbing ----------------------------------------------------------------------------

    def _listen(self, port: int) -> int:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return listener.getsockname()[1]

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by refuse()
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        # A connection accepted during a partition is held until it heals (or gives up).
        if not self._wait_open(client):
            return
        try:
            server = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            _reset(client)
            return
        with self._lock:
            self._pairs.append((client, server))
        self._pump(client, server)

    def _wait_open(self, client: socket.socket) -> bool:
        while self.mode != OPEN:
            if self._closed.is_set() or self.mode == REFUSE or _hung_up(client):
                _reset(client)
                return False
            self._closed.wait(0.05)
        return True

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        peers = {client: server, server: client}
        try:
            while not self._closed.is_set():
                if self.mode == BLACK_HOLE:
                    self._closed.wait(0.05)  # read nothing: the bytes wait in the kernel
                    continue
                ready, _, _ = select.select(list(peers), [], [], 0.05)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except (OSError, ValueError):  # ValueError: a socket refuse() closed under select
            return
        finally:
            for sock in peers:
                with suppress(OSError):
                    sock.close()


def _reset(sock: socket.socket) -> None:
    """Close with an RST (linger 0), as a crashed peer's host would."""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with suppress(OSError):
        sock.close()


def _hung_up(sock: socket.socket) -> bool:
    """Whether the peer closed its end (without reading what it sent)."""
    try:
        ready, _, _ = select.select([sock], [], [], 0)
        return bool(ready) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):  # ValueError: closed already (its descriptor is -1)
        return True
