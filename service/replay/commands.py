"""The command handlers as a trace replay sees them: the database's only writer
(``service.replay.run`` drives them; ``service.replay.trace`` reads the trace)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any

from domain.states import VmState
from domain.vm import Vm
from service.commands.application import Commands, never_stuck
from service.commands.committer import Committer, Handover
from service.commands.snapshots import snapshot_long_streams

# Group commit of the replay's appends: at most this many a transaction, waiting at most
# this long for a batch to fill; at most MAX_IN_FLIGHT appends handed over and not yet
# committed (memory stays bounded when the disk is slower than the replay). MAX_IN_FLIGHT is
# far below ReplayCommands' cache size, so an aggregate that falls out of the cache (and is
# then read from the log) was saved long enough ago to be committed.
BATCH_APPENDS = 500
BATCH_LINGER_S = 0.02
MAX_IN_FLIGHT = 5_000
# How many aggregates the replay keeps, the most recently saved: more than a shard's 196,585
# VMs and 12,500 servers, about 2 KB each. With 40,000, a task submitted early in the shard
# was often scheduled or killed after its VM had left the cache, and reading and folding such
# streams again was 36 % of the whole shard's replay in mid-run (docs/performance.md).
CACHE_SIZE = 250_000


class ReplayAppendFailedError(RuntimeError):
    """An append the replay handed over without waiting failed (the replay is the only
    writer: a bug, not a race). Not an ``IntegrityError``: raised at a later save, the
    change loop would take it for that later command's conflict and retry it."""


class ReplayCommands(Commands):
    """The API's command handlers, unchanged, with additions for a replay that is the
    database's only writer: they note each VM's state and job count whenever they save it (so
    the replay follows the trace without reading VMs), and ``load_aggregate`` (the one loader)
    answers with the aggregates they last saved instead of reading and folding the stream
    again. It hands out the saved aggregate itself, not a copy: the next change of a stream
    starts from what the last one saved, and a change that raises (a refusal, after its
    decision may have recorded events) drops from the cache every aggregate left with events
    it never saved (``change``). A conflict with another writer empties the cache, so the
    retry reads the stream: a stale aggregate can cost a retry, never a lost update. A
    server's status is read once a server. And its changes all run on the replay's one
    thread (its worker renews no leases), so they take no turns (``Committer(one_thread=)``).

    The trace is the truth about what ran where, and when; two policies of the live service
    would contradict it, so these handlers are built without them. Capacity: Borg
    overcommits, so claims are recorded but never refused. The stuck-VM rule (a DELETE of a
    VM provisioning for an hour quarantines it): it measures wall-clock time, which a replay
    squeezes or stretches. And the read model is not asked for VMs whose alias no hold
    records (service/commands/aliases.py): a replay starts on a log with no events, so every
    VM it has took its alias through a hold.
    """

    def __init__(self, base: Commands, *, cache_size: int = CACHE_SIZE):
        self.seen: dict[str, tuple[VmState, int]] = {}  # vm uuid -> (state, active jobs)
        self._saved: OrderedDict[str, Any] = OrderedDict()  # uuid -> Vm or Server, LRU
        # cached aggregates handed out and not saved since: only these can hold unsaved events
        self._handed_out: dict[str, Any] = {}
        self._cache_size = cache_size
        self._in_flight: deque[Handover] = deque()
        self._position = 0
        counted = base.on_conflict

        def on_conflict() -> None:
            self.flush()  # the log, read again, must hold what the cache held
            self._saved.clear()
            self._handed_out.clear()
            counted()

        statuses: dict[str, str | None] = {}

        def server_status(server_uuid: str) -> str | None:
            # Only the simulated fleet's operator commands change a server's status, and
            # nothing else runs beside the replay: read once a server, not every DeleteVm.
            if server_uuid not in statuses:
                statuses[server_uuid] = base.server_status(server_uuid)
            return statuses[server_uuid]

        # The same store, keys, retries and hooks as the service's handlers ``base``.
        super().__init__(
            base.app, keys=base.keys, retries=base.retries, on_conflict=on_conflict,
            server_status=server_status, is_stuck=never_stuck, enforce_capacity=False,
            committer=Committer(base.app, max_appends=BATCH_APPENDS, linger_s=BATCH_LINGER_S,
                                one_thread=True, cache_saves=False),
            after_save=base.after_save,  # legacy_holders: none (docstring)
            unique_aliases=base.unique_aliases)

    def load_aggregate(self, kind: Any, uuid: Any, version: int | None = None) -> Any:
        key = str(uuid)
        cached = self._saved.get(key) if version is None else None
        if cached is not None and isinstance(cached, kind):
            self._handed_out[key] = cached
            return cached
        return super().load_aggregate(kind, uuid, version)

    def change(self, *args: Any, **kwargs: Any) -> Any:
        """``Changes.change``; when it raises, the aggregates it was given from the cache may
        hold events of a decision that was never saved (the library applies an event as it
        is triggered): those are dropped, and read from the log when next loaded."""
        try:
            return super().change(*args, **kwargs)
        except Exception:
            self._drop_unsaved()
            raise

    def _drop_unsaved(self) -> None:
        # Only aggregates handed out and not saved since can hold such events: a refused row
        # is common, and a scan of the whole cache cost milliseconds each.
        unsaved = [key for key, aggregate in self._handed_out.items()
                   if aggregate.pending_events and self._saved.get(key) is aggregate]
        self._handed_out.clear()
        if unsaved:
            self.flush()  # the log, read again, must hold their last saves
            for key in unsaved:
                del self._saved[key]

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
            self._handed_out.pop(key, None)
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
        while self._in_flight and (self._in_flight[0].done
                                   or len(self._in_flight) >= MAX_IN_FLIGHT):
            self._settle(self._in_flight.popleft())
        self._in_flight.append(self.committer.hand_over(*aggregates))
        return self._position

    def flush(self) -> int:
        """Wait until every append handed over is committed; the log position after the
        last. Raises ``ReplayAppendFailedError`` for a failed append."""
        while self._in_flight:
            self._settle(self._in_flight.popleft())
        return self._position

    def _settle(self, handover: Handover) -> None:
        try:
            recordings = self.committer.wait_for(handover)
        except Exception as error:
            raise ReplayAppendFailedError(f"a replayed append failed: {error}") from error
        self._position = max(self._position, recordings[-1].notification.id)
        snapshot_long_streams(self.app, recordings)
        for callback in self.after_save:
            callback(self._position)

