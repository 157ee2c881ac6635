"""The command handlers as a trace replay sees them: the database's only writer
(``service.replay.run`` drives them; ``service.replay.trace`` reads the trace)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from domain.states import VmState
from domain.vm import Vm
from service.commands.application import Commands, never_stuck
from service.commands.committer import Committer
from service.commands.snapshots import snapshot_long_streams

# Group commit of the replay's appends: at most this many a transaction, waiting at most
# this long for a batch to fill; at most MAX_IN_FLIGHT appends handed over and not yet
# committed (memory stays bounded when the disk is slower than the replay). MAX_IN_FLIGHT is
# far below ReplayCommands' cache size, so an aggregate that falls out of the cache (and is
# then read from the log) was saved long enough ago to be committed.
BATCH_APPENDS = 500
BATCH_LINGER_S = 0.02
MAX_IN_FLIGHT = 5_000


class ReplayAppendFailedError(RuntimeError):
    """An append the replay handed over without waiting failed (the replay is the only
    writer: a bug, not a race). Not an ``IntegrityError``: raised at a later save, the
    change loop would take it for that later command's conflict and retry it."""


class ReplayCommands(Commands):
    """The API's command handlers, unchanged, with two additions for a replay that is the
    database's only writer: they note each VM's state and job count whenever they save it (so
    the replay follows the trace without reading VMs), and ``load_aggregate`` (the one loader)
    answers from the aggregates they last saved (a copy, as the library's own aggregate cache
    does) instead of reading and folding the stream again. A conflict with another writer
    empties that cache, so the retry reads the stream: a stale copy can cost a retry, never a
    lost update.

    The trace is the truth about what ran where, and when; two policies of the live service
    would contradict it, so these handlers are built without them. Capacity: Borg
    overcommits, so claims are recorded but never refused. The stuck-VM rule (a DELETE of a
    VM provisioning for an hour quarantines it): it measures wall-clock time, which a replay
    squeezes or stretches.
    """

    def __init__(self, base: Commands, *, cache_size: int = 40_000):
        self.seen: dict[str, tuple[VmState, int]] = {}  # vm uuid -> (state, active jobs)
        self._saved: OrderedDict[str, Any] = OrderedDict()  # uuid -> Vm or Server, LRU
        self._cache_size = cache_size
        self._in_flight: deque[Future[Any]] = deque()
        self._position = 0
        counted = base.on_conflict

        def on_conflict() -> None:
            self.flush()  # the log, read again, must hold what the cache held
            self._saved.clear()
            counted()

        # The same store, keys, retries and hooks as the service's handlers ``base``.
        super().__init__(
            base.app, keys=base.keys, retries=base.retries, on_conflict=on_conflict,
            server_status=base.server_status, is_stuck=never_stuck, enforce_capacity=False,
            committer=Committer(base.app, max_appends=BATCH_APPENDS, linger_s=BATCH_LINGER_S),
            after_save=base.after_save)

    def _cached(self, uuid: Any) -> Any:
        saved = self._saved.get(str(uuid))
        if saved is None:
            return None
        clone = object.__new__(type(saved))
        clone.__dict__.update({k: _copied(v) for k, v in vars(saved).items()})
        return clone

    def load_aggregate(self, kind: Any, uuid: Any, version: int | None = None) -> Any:
        cached = self._cached(uuid) if version is None else None
        if cached is not None and isinstance(cached, kind):
            return cached
        return super().load_aggregate(kind, uuid, version)

    def save(self, *aggregates: Any, **options: Any) -> int:
        if options.get("idempotency") is not None:  # not the replay's: wait, as the API does
            position = super().save(*aggregates, **options)
        else:
            position = self._save_later(aggregates)
        for aggregate in aggregates:
            key = str(aggregate.id)
            if isinstance(aggregate, Vm):
                self.seen[key] = (VmState(aggregate.state), len(aggregate.active_jobs))
            self._saved[key] = aggregate
            self._saved.move_to_end(key)
            if len(self._saved) > self._cache_size:
                self._saved.popitem(last=False)
        return position


    def _save_later(self, aggregates: Sequence[Any]) -> int:
        """Hand the append to the group committer and go on without waiting: the replay
        reads its VMs from ``_saved``, not the log, so many VMs' commands share a
        transaction (batched by ``BATCH_APPENDS`` and ``BATCH_LINGER_S``). Returns the log's
        last known position (the append's own is not known yet). A failed append (the
        replay is the only writer: a bug, not a race) is raised by a later save or by
        ``flush`` as ``ReplayAppendFailedError``."""
        while self._in_flight and (self._in_flight[0].done()
                                   or len(self._in_flight) >= MAX_IN_FLIGHT):
            self._settle(self._in_flight.popleft())
        self._in_flight.append(self.committer.submit(*aggregates))
        return self._position

    def flush(self) -> int:
        """Wait until every append handed over is committed; the log position after the
        last. Raises ``ReplayAppendFailedError`` for a failed append."""
        while self._in_flight:
            self._settle(self._in_flight.popleft())
        return self._position

    def _settle(self, future: Future[Any]) -> None:
        try:
            recordings = future.result()
        except Exception as error:
            raise ReplayAppendFailedError(f"a replayed append failed: {error}") from error
        self._position = max(self._position, recordings[-1].notification.id)
        snapshot_long_streams(self.app, recordings)
        for callback in self.after_save:
            callback(self._position)


def _copied(value: Any) -> Any:
    """A copy of an aggregate attribute. Its state is what the snapshot transcoder stores:
    dicts and lists over immutable leaves (str, int, UUID, datetime, enums), so copying the
    containers isolates the copy; ``copy.deepcopy`` costs as much as folding the stream."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value
