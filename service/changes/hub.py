"""One reader of the log per process, fanned out to every open change stream.

The hub tails the log (``LogReader``: in order, nothing skipped), tells each event as a
``Change`` once (``ChangeFolder``) and hands it to every subscribed stream's buffer. A stream
that starts behind the hub reads the log itself until it reaches the hub's position, then
subscribes, with no wait in between, so no change falls between the two. Buffers are
bounded: a stream whose reader is too slow to take its changes is cut (it can resume from
its last position), and the hub never waits for a stream, nor a writer for the hub (writers
only wake it). docs/api.md, "Changes".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter, Gauge

from service.changes.filters import ChangeFilter
from service.changes.reader import LogReader, Proof, SettledHorizon
from service.changes.records import Change, ChangeFolder
from service.database_failures import database_cause

log = logging.getLogger(__name__)

# Resources a stream catching up keeps folded (the hub's own folder keeps ChangeFolder's
# default): a stream far behind reads the log itself until it reaches the hub.
CATCH_UP_CACHE = 1_000

OPEN_STREAMS = Gauge("vmledger_change_streams", "Change streams open now", ["protocol"])
CHANGES_SENT = Counter("vmledger_changes_sent_total", "Changes sent to streams", ["protocol"])
STREAMS_DROPPED = Counter(
    "vmledger_change_streams_dropped_total",
    "Change streams cut for falling behind (behind), refused at the limit (limit), or ended "
    "because catching up could not read the log (error)",
    ["reason"])
GAPS_PASSED = Counter(
    "vmledger_changefeed_gaps_timed_out_total",
    "Log positions the changefeed passed after waiting gap_timeout_s for them to commit")


@dataclass(frozen=True)
class HubLimits:
    """``batch``: events read per query; ``buffer``: changes a stream may have waiting;
    ``max_streams``: open streams per process; ``poll_s``: how often the log is read without
    a wake-up; ``heartbeat_s``: idle time before a heartbeat; ``gap_timeout_s``: see
    ``LogReader``."""

    batch: int = 500
    buffer: int = 10_000
    max_streams: int = 100
    poll_s: float = 0.5
    heartbeat_s: float = 15.0
    gap_timeout_s: float = 60.0

    @classmethod
    def from_settings(cls, settings: Any) -> HubLimits:
        """The limits of ``Settings`` (``changes_*``)."""
        return cls(buffer=settings.changes_buffer, max_streams=settings.changes_max_streams,
                   poll_s=settings.changes_poll_s, heartbeat_s=settings.changes_heartbeat_s,
                   gap_timeout_s=settings.changes_gap_timeout_s)


class TooManyStreamsError(Exception):
    """The process already serves ``max_streams`` change streams."""


@dataclass(frozen=True)
class StreamEnd:
    """The hub ended a stream: why, and the position to resume after."""

    reason: str
    resume_after: int


def behind(limit: int) -> str:
    """Why a stream was cut for falling behind (its ``StreamEnd.reason``)."""
    return (f"too far behind: more than {limit} changes waiting to be sent; "
            "resume from the last id received")


@dataclass(eq=False)
class _Subscriber:
    filter: ChangeFilter
    limit: int
    buffer: deque[Change] = field(default_factory=deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    cut: str | None = None

    def offer(self, changes: list[Change]) -> None:
        if self.cut is not None:
            return
        shown = [c for c in changes if self.filter.matches(c)]
        if not shown:
            # Not woken: its wait is also its heartbeat's timer, which a wake-up for nothing
            # (every tail pass, several a heartbeat) would start again, so it never ran out.
            return
        if len(self.buffer) + len(shown) > self.limit:
            self.cut = behind(self.limit)
            self.buffer.clear()
            STREAMS_DROPPED.labels(reason="behind").inc()
        else:
            self.buffer.extend(shown)
        self.ready.set()


class ChangeHub:
    """The process's change streams over one application (``app``: the ``VmLedger``)."""

    def __init__(self, app: Any, limits: HubLimits):
        self.app = app
        self.limits = limits
        self.position = 0
        # What any of the process's readers proved of the log's gaps, the others need not. It
        # follows the hub's position once the start's proof holds (``_read_tail``).
        self._horizon = SettledHorizon()
        self._reader = self._new_reader()
        self._start_proof: Proof | None = None
        self._folder = ChangeFolder(app)
        self._subscribers: set[_Subscriber] = set()
        self._open = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._started: asyncio.Lock | None = None
        self.stopping = threading.Event()
        # The same as ``stopping``, for coroutines to wait on; and "no stream open now".
        self._ended = asyncio.Event()
        self._none_open = asyncio.Event()
        self._none_open.set()

    def _new_reader(self) -> LogReader:
        return LogReader(self.app.recorder, gap_timeout_s=self.limits.gap_timeout_s,
                         on_gap_skipped=GAPS_PASSED.inc, horizon=self._horizon)

    # -- the tail -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start tailing the log from its head (once; later calls return at once)."""
        if self._started is None:
            self._started = asyncio.Lock()
        async with self._started:
            if self._task is not None:
                return
            self._loop = asyncio.get_running_loop()
            self._wake = asyncio.Event()
            self._start_proof = await asyncio.to_thread(self._reader.begin_proof)
            self.position = self._start_proof.head
            self._task = asyncio.create_task(self._tail(), name="vmledger-change-hub")

    def wake(self, *_: object) -> None:
        """Ask the hub to read the log now; callable from any thread (a writer's)."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(wake.set)

    async def _tail(self) -> None:
        assert self._wake is not None
        while not self.stopping.is_set():
            self._wake.clear()
            try:
                changes, position = await asyncio.to_thread(self._read_tail)
            except Exception as error:  # noqa: BLE001 - a database outage: keep streams, retry
                log.warning("changefeed: reading the log failed: %s: %s",
                            type(error).__name__, error)
                changes, position = [], self.position
                await asyncio.sleep(self.limits.poll_s)
            # One step, with no await: a stream subscribing now sees either all or none.
            self.position = max(self.position, position)
            for subscriber in self._subscribers:
                subscriber.offer(changes)
            if len(changes) >= self.limits.batch:
                continue
            wait = self.limits.poll_s / 10 if self._reader.waiting_on_gap else self.limits.poll_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    def _read_tail(self) -> tuple[list[Change], int]:
        """The hub's next read. Every position up to the hub's is read or settled once the
        proof begun at its start holds (no transaction that could still commit below the
        start is running), so from then on the horizon follows it: a stream catching up
        passes every gap the hub passed without proving it again."""
        changes, position = self._read(self._reader, self._folder, self.position, None)
        start = self._start_proof
        if start is not None and self._reader.proven(start):
            self._start_proof = start = None
        if start is None:
            self._horizon.raise_to(position + 1)
        return changes, position

    def _read(self, reader: LogReader, folder: ChangeFolder, after: int, stop: int | None,
              ) -> tuple[list[Change], int]:
        notifications, position = reader.read_after(after, self.limits.batch, stop)
        return folder.fold(notifications), position

    # -- streams ------------------------------------------------------------------------

    @contextlib.contextmanager
    def admitted(self, protocol: str) -> Iterator[None]:
        """Count a stream open for its duration; raises ``TooManyStreamsError`` at the
        limit."""
        if self._open >= self.limits.max_streams:
            STREAMS_DROPPED.labels(reason="limit").inc()
            raise TooManyStreamsError(
                f"this process already serves {self.limits.max_streams} change streams")
        self._open += 1
        self._none_open.clear()
        OPEN_STREAMS.labels(protocol=protocol).inc()
        try:
            yield
        finally:
            self._open -= 1
            if not self._open:
                self._none_open.set()
            OPEN_STREAMS.labels(protocol=protocol).dec()

    @staticmethod
    def sent(protocol: str, item: Change | StreamEnd | None) -> None:
        """Count a change sent on a ``protocol`` stream (heartbeats and ends are not)."""
        if isinstance(item, Change):
            CHANGES_SENT.labels(protocol=protocol).inc()

    async def stream(self, after: int | None, shown: ChangeFilter,
                     ) -> AsyncIterator[Change | StreamEnd | None]:
        """The changes after position ``after`` (``None``: from now) that ``shown`` matches, in
        log order, each once; ``None`` when ``heartbeat_s`` passed with nothing to send; a
        final ``StreamEnd`` when the hub cuts the stream. A position past the head waits for
        the log to reach it."""
        await self.start()
        cursor = self.position if after is None else after
        if cursor < self.position:
            reader, folder = self._new_reader(), ChangeFolder(self.app, CATCH_UP_CACHE)
            while cursor < self.position and not self.stopping.is_set():
                try:
                    changes, reached = await asyncio.to_thread(
                        self._read, reader, folder, cursor, self.position)
                except Exception as error:  # noqa: BLE001 - an outage: end it, resumable
                    # a raised error would drop the connection with nothing said
                    log.warning("changefeed: a stream catching up could not read the log: "
                                "%s: %s", type(error).__name__, error)
                    STREAMS_DROPPED.labels(reason="error").inc()
                    yield StreamEnd(f"reading the log failed: {database_cause(error)}", cursor)
                    return
                for change in changes:
                    if shown.matches(change):
                        yield change
                if reached == cursor:
                    await asyncio.sleep(self.limits.poll_s / 10)  # before a gap still open
                cursor = reached
            del reader, folder  # what the catch-up folded is not needed any more
        subscriber = _Subscriber(shown, self.limits.buffer)
        self._subscribers.add(subscriber)  # no await since the loop's test: nothing missed
        try:
            while True:
                while subscriber.buffer:
                    change = subscriber.buffer.popleft()
                    if change.position > cursor:
                        cursor = change.position
                        yield change
                if subscriber.cut is not None:
                    yield StreamEnd(subscriber.cut, cursor)
                    return
                if self.stopping.is_set():
                    yield StreamEnd("the service is shutting down", cursor)
                    return
                subscriber.ready.clear()
                try:
                    await asyncio.wait_for(subscriber.ready.wait(), self.limits.heartbeat_s)
                except TimeoutError:
                    yield None
        finally:
            self._subscribers.discard(subscriber)

    def _end_streams(self) -> None:
        self.stopping.set()
        self._ended.set()
        for subscriber in self._subscribers:
            subscriber.ready.set()

    async def ended(self) -> None:
        """Return once the hub has ended its streams (shutting down)."""
        await self._ended.wait()

    async def end_streams(self, wait_s: float) -> bool:
        """End every stream (each gets its ``StreamEnd``, "the service is shutting down")
        and wait up to ``wait_s`` for all of them to close; whether they all did. For a
        server about to close its connections itself: what it would cut (a WebSocket with
        code 1012 and no reason) first gets its own end, naming its position."""
        self._end_streams()
        try:
            await asyncio.wait_for(self._none_open.wait(), wait_s)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """End every stream and stop tailing."""
        self._end_streams()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
