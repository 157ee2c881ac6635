"""The command handlers as a trace replay sees them: the database's only writer
(``service.replay.run`` drives them; ``service.replay.trace`` reads the trace)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from domain.states import VmState
from domain.vm import Vm
from service.commands.application import Commands


class ReplayCommands(Commands):
    """The API's command handlers, unchanged, with two additions for a replay that is the
    database's only writer: they note each VM's state and job count whenever they save it (so
    the replay follows the trace without reading VMs), and ``load_aggregate`` (the one loader)
    answers from the aggregates they last saved (a copy, as the library's own aggregate cache
    does) instead of reading and folding the stream again. A conflict with another writer
    empties that cache, so the retry reads the stream: a stale copy can cost a retry, never a
    lost update.
    """

    def __init__(self, base: Commands, *, cache_size: int = 40_000):
        vars(self).update(vars(base))  # the same store, keys, retries and hooks as the service
        self.seen: dict[str, tuple[VmState, int]] = {}  # vm uuid -> (state, active jobs)
        self._saved: OrderedDict[str, Any] = OrderedDict()  # uuid -> Vm or Server, LRU
        self._cache_size = cache_size
        base_on_conflict = base.on_conflict

        def on_conflict() -> None:
            self._saved.clear()
            base_on_conflict()

        self.on_conflict = on_conflict

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
        position = super().save(*aggregates, **options)
        for aggregate in aggregates:
            key = str(aggregate.id)
            if isinstance(aggregate, Vm):
                self.seen[key] = (VmState(aggregate.state), len(aggregate.active_jobs))
            self._saved[key] = aggregate
            self._saved.move_to_end(key)
            if len(self._saved) > self._cache_size:
                self._saved.popitem(last=False)
        return position


def _copied(value: Any) -> Any:
    """A copy of an aggregate attribute. Its state is what the snapshot transcoder stores:
    dicts and lists over immutable leaves (str, int, UUID, datetime, enums), so copying the
    containers isolates the copy; ``copy.deepcopy`` costs as much as folding the stream."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value
