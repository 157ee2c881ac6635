"""``vmledger serve --workers N``: N uvicorn processes, each accepting on a listening socket
of its own bound with ``SO_REUSEPORT``, so that the kernel spreads new connections over them.

uvicorn's own multiprocess mode shares one listening socket between its processes, and an
asyncio event loop accepts every connection waiting when it wakes: a burst of keep-alive
connections (16 clients starting together, or a client's connection pool) landed nearly all
on one process, one core busy and the others idle (docs/performance.md, P1).

Each process is a ``uvicorn.Server`` (``serving.StreamEndingServer``) in a process group of
its own, so that a terminal's ^C reaches the parent only. The parent turns the first SIGINT or
SIGTERM into a SIGTERM for every process (in-flight requests finish, then each ends) and any
later one into a SIGINT (uvicorn's "force exit"). When one process ends by itself, the parent stops the others, so a
process manager sees the service end.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
from collections.abc import Callable
from typing import Any

from service.api.serving import StreamEndingServer

APP = "service.api.app:create_served_app"  # what every ``serve`` process runs
log = logging.getLogger(f"vmledger.{__name__}")
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` with ``SO_REUSEPORT`` (not yet listening).
    Raises ``OSError`` when the address cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _check_free(host: str, port: int) -> None:
    """Raise ``OSError`` if anything listens on ``host:port``, another ``serve --workers``
    included: a socket without ``SO_REUSEPORT`` cannot share the port with those that have
    it, so this bind fails where the processes' own would quietly share it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


def _serve_one(parent: int, host: str, port: int, options: dict[str, Any],
               ready: Any) -> None:
    """One HTTP process: a ``ChildServer`` on a socket of its own, in a process group of its
    own, ending when ``parent`` does; sends ``True`` on ``ready`` once it listens.

    It starts with SIGINT ignored (``serve_processes``), and imports the app so, in the
    terminal's process group until the line below: a ^C meanwhile is the parent's to pass
    on. Then SIGINT is Python's again, for the parent's own (a second stop: uvicorn's force
    exit, which uvicorn's handler takes once it serves)."""
    import uvicorn

    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _end_with(parent)
    server = ChildServer(uvicorn.Config(APP, factory=True, **options), parent, ready)
    server.run(sockets=[reuse_port_socket(host, port)])


class ChildServer(StreamEndingServer):
    """An HTTP process of ``serve --workers``, which ends quietly once its parent is
    gone, whatever it was doing: one ``WARNING`` line and no traceback. A parent killed
    outright while its processes started made each log an ``ERROR`` with a traceback
    (its report of being ready, ``BrokenPipeError``) and multiprocessing then print ~35
    lines of plain text to stderr (operator tester); one killed once they serve made
    each log uvicorn's shutdown lines, saying nothing of why."""

    def __init__(self, config: Any, parent: int, ready: Any):
        super().__init__(config, on_started=self._report_ready)
        self.parent, self.ready, self.orphaned = parent, ready, False

    def _report_ready(self, _port: int) -> None:
        try:
            self.ready.send(True)
        except OSError:  # BrokenPipeError: no reader, the parent is gone (or ending)
            self.orphaned = self.should_exit = True  # uvicorn then shuts down

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """The server's shutdown; when the parent is gone (its SIGTERM on the parent's
        death, ``_end_with``, or a report of being ready that nobody read), said in one
        line and no more: what the shutdown would log (uvicorn's four lines, the app's)
        says nothing an operator needs then, and warnings and errors still show."""
        if self.orphaned or os.getppid() != self.parent:
            log.warning("the parent process (pid %s) is gone: HTTP process %s (pid %s) "
                        "ends", self.parent, multiprocessing.current_process().name,
                        os.getpid())
            logging.disable(logging.INFO)
        await super().shutdown(sockets)


def serve_processes(workers: int, host: str, port: int, options: dict[str, Any]) -> int:
    """Run ``workers`` uvicorn processes on ``host:port`` with ``options`` (``uvicorn.Config``
    keyword arguments) until they end; return 0 when they were asked to stop, else the exit
    status of the first one that ended by itself. Raises ``ValueError`` for port 0 (each
    process would get a port of its own) and ``OSError`` when the address is taken."""
    if port == 0:
        raise ValueError("--workers above 1 needs a fixed --port (with port 0 each process "
                         "would listen on a port of its own)")
    _check_free(host, port)
    context = multiprocessing.get_context("spawn")
    # a pipe each, not an Event: a semaphore would start multiprocessing's resource tracker,
    # one more process beside the HTTP ones
    pipes = [context.Pipe(duplex=False) for _ in range(workers)]
    processes = [context.Process(target=_serve_one,
                                 args=(os.getpid(), host, port, options, pipes[n][1]),
                                 name=f"vmledger-http-{n}") for n in range(workers)]
    asked: list[int] = []

    def pass_on(signum: int, _frame: object) -> None:
        asked.append(signum)
        for process in processes:
            _signal(process, signal.SIGTERM if len(asked) == 1 else signal.SIGINT)

    previous = {signum: signal.signal(signum, pass_on)
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        # Each process starts with SIGINT ignored, a disposition it keeps across its exec,
        # until it is in a process group of its own (``_serve_one``): it moved there only
        # once it had imported the app, and a terminal's ^C during those imports printed
        # each one's ``KeyboardInterrupt`` traceback (a tester). (SIGINT only blocked here
        # is not relied on: the processes were found importing with an empty mask.) Here
        # SIGINT is blocked meanwhile, so one that arrives is held, not ignored, and
        # reaches ``pass_on`` once it is unblocked.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                for process in processes:
                    process.start()
            finally:
                signal.signal(signal.SIGINT, pass_on)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        by_sentinel = {process.sentinel: process for process in processes}
        for _, sending in pipes:
            sending.close()  # the children's ends: a child's end closing reads as EOF here
        _announce_when_listening(host, port, [receiving for receiving, _ in pipes],
                                 list(by_sentinel), stopping=lambda: bool(asked))
        first = by_sentinel[multiprocessing.connection.wait(list(by_sentinel))[0]]
        first.join()
        if not asked:
            log.error("HTTP process %s (pid %s) ended with status %s: stopping the others",
                      first.name, first.pid, first.exitcode)
        for process in processes:
            _signal(process, signal.SIGTERM)
        for process in processes:
            process.join()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if asked:
        return 0
    # a process killed by signal N ends the parent as a shell reports it: 128 + N (it was N)
    return 128 - first.exitcode if (first.exitcode or 0) < 0 else first.exitcode or 0


def _announce_when_listening(host: str, port: int, readiness: list[Any],
                             sentinels: list[Any], stopping: Callable[[], bool],
                             timeout_s: float = 60.0) -> None:
    """Log one line once every process accepts connections (each sends on its pipe of
    ``readiness`` then), or return without it if a process ends first, ``stopping()``
    says the processes were told to stop (the parent's signal handler told them: a
    stopped service said it was listening after they had shut down, a tester), or
    ``timeout_s`` passes. (Probing the port said so once the first process did, seconds
    before the last: operator tester.)"""
    import time

    from service.api.serving import announce_listening

    waiting = list(readiness)
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline and not stopping():
        ready = multiprocessing.connection.wait([*waiting, *sentinels], timeout=1)
        if any(sentinel in ready for sentinel in sentinels):
            return  # a process ended: the caller reports it
        for pipe in ready:
            try:
                pipe.recv()
            except EOFError:
                return  # its process is ending
            waiting.remove(pipe)
    if not waiting and not stopping():  # the handler tells them after it says it is asked
        announce_listening(host, port, len(readiness))


def _end_with(parent: int) -> None:
    """Linux: get a SIGTERM when ``parent`` ends, so that a parent killed with SIGKILL (which
    it cannot pass on) leaves no process serving behind it."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it ended before the line above
        os._exit(1)


def _signal(process: multiprocessing.process.BaseProcess, signum: int) -> None:
    if process.pid is None or process.exitcode is not None:
        return
    try:
        os.kill(process.pid, signum)
    except ProcessLookupError:
        pass  # it has just ended
