"""The process's cache of folded aggregates, and when the change loop may decide on it without
reading the log first (docs/architecture.md, "Deciding on the cache").

The library's cache (``Repository.cache``, ``AGGREGATE_CACHE_MAXSIZE``) holds committed
folds only: what this process's committer saved (``SavedHere.record``, from the committer's
thread), and what a load folded or fast-forwarded from the log (``fold_current``). Nothing
changes a cached aggregate in place: a load hands out a copy. That is why the library's own
fast-forward is off (``AGGREGATE_CACHE_FASTFORWARD``): it folds new events into the cached
object itself, which after a save is the saving command's aggregate, still being read for
its answer.
"""

from __future__ import annotations

import threading
from copy import deepcopy
from datetime import datetime
from enum import Enum
from typing import Any
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError

from domain.errors import StreamGapError
from domain.folding import fold_stored


# The types of value a copy may share with its original: none can change in place.
_SHARED = frozenset((str, int, float, bool, type(None), bytes, UUID, datetime))


def copy_of_fold(aggregate: Any) -> Any:
    """A copy of ``aggregate`` that shares nothing changeable with it: what ``deepcopy``
    gives, in about a fifth of its time for a folded VM (7 µs against 35).

    A fold's state is values the events carried (their JSON's dicts, lists, strings, numbers,
    uuids, instants and the domain's enums), no two attributes holding the same container:
    dicts and lists are copied, the immutable values shared, and anything else goes through
    ``deepcopy``. An aggregate with pending events, whose events may share containers with
    its state, is copied by ``deepcopy`` whole. Used by every load of a cached fold: once a
    command (docs/performance.md, "The garbage collector")."""
    if aggregate.pending_events:
        return deepcopy(aggregate)
    twin = object.__new__(type(aggregate))
    twin.__dict__.update({name: _copied(value) for name, value in vars(aggregate).items()})
    return twin


def _copied(value: Any) -> Any:
    """``value`` with its dicts and lists copied, however deep, without recursion: a value a
    client sent nested about 1,000 levels (before the API refused more than
    ``json_input.MAX_DEPTH``) made a recursive copy raise RecursionError, so every later load
    of its VM failed, and with it the job worker's pass."""
    kind = type(value)
    if kind is not dict and kind is not list:
        return _leaf(value)
    top: Any = {} if kind is dict else []
    pending = [(value, top)]
    while pending:
        source, target = pending.pop()
        items = source.items() if type(source) is dict else enumerate(source)
        adding = type(target) is list
        for key, item in items:
            kind = type(item)
            if kind is dict or kind is list:
                copy: Any = {} if kind is dict else []
                pending.append((item, copy))
            else:
                copy = _leaf(item)
            if adding:
                target.append(copy)
            else:
                target[key] = copy
    return top


def _leaf(value: Any) -> Any:
    if type(value) in _SHARED or isinstance(value, Enum):
        return value
    return deepcopy(value)


class SavedHere:
    """The version this process last appended to each stream, for the ``maxsize`` streams
    saved most recently (an LRU: stream id -> version); and how often such a save was still
    the stream's last when next changed here (``right_share``), which decides whether the
    change loop trusts it (``trusted``).

    Whether it is right depends on the deployment: with the API, the job worker and the
    agents in one process (the embedded mode) every write goes through this process, and
    it is always right; an API process beside separate workers finds each VM moved by the
    worker's steps since its own command, and is nearly always wrong. A wrong guess costs
    more than the read it saves (a failed append, which on PostgreSQL sends its batch
    again: service/group_commit.py), so the cache is trusted only while at least
    ``TRUST_ABOVE`` of recent guesses were right. The share starts at 1 (trusted) and
    moves by ``WEIGHT`` of the difference with each outcome (a mean over about the last 50):
    about six wrong guesses in a row stop the trust; after a long run of wrong ones, about a
    hundred right ones bring it back (learnt while not trusting, by comparing each fresh
    load with the save)."""

    TRUST_ABOVE = 0.9
    WEIGHT = 0.02

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self.right_share = 1.0
        self._versions: dict[UUID, int] = {}
        self._lock = threading.Lock()

    def record(self, aggregate_id: UUID, version: int) -> None:
        """This process's append took stream ``aggregate_id`` to ``version``."""
        with self._lock:
            self._versions.pop(aggregate_id, None)
            self._versions[aggregate_id] = version
            if len(self._versions) > self.maxsize:
                del self._versions[next(iter(self._versions))]

    def version(self, aggregate_id: UUID) -> int | None:
        """The version of this process's last append to ``aggregate_id``, if remembered."""
        return self._versions.get(aggregate_id)

    @property
    def trusted(self) -> bool:
        """Whether recent guesses were right often enough to decide on a save unread."""
        return self.right_share >= self.TRUST_ABOVE

    def note(self, right: bool) -> None:
        """A save of this process was (``right``) or was not still its stream's last."""
        with self._lock:
            self.right_share += self.WEIGHT * (float(right) - self.right_share)


def cached_save(app: Any, saved: SavedHere, aggregate_id: UUID) -> Any | None:
    """The cached fold of stream ``aggregate_id`` when it is the one this process's own last
    append made (the cached object itself: copy it before any change), without reading the
    log; None otherwise (not cached, or the cached fold came from a read). It may be stale
    (another process may have appended since): the change loop accepts a decision made on
    it only once its append commits, which the stream's expected version guarantees was
    made on the stream's last event (``Changes.change``)."""
    cache = app.repository.cache
    if cache is None:
        return None
    try:
        cached = cache.get(aggregate_id)
    except KeyError:
        return None
    return cached if saved.version(aggregate_id) == cached.version else None


def fold_current(app: Any, aggregate_id: UUID) -> Any:
    """The aggregate of stream ``aggregate_id`` as its last stored event left it: a copy of
    the cached fold with the stream's newer events folded in (one read of the log), or, when
    it is not cached, folded from the log (with its snapshot) and cached. A fold that moved
    is cached, unless a newer one was cached meanwhile. Raises the library's
    ``AggregateNotFoundError`` when there is no such stream, a ``DamagedStreamError`` when
    a stored event cannot be folded (``domain.folding``)."""
    repository = app.repository
    cache = repository.cache
    try:
        cached = cache.get(aggregate_id)
    except KeyError:
        return repository.get(aggregate_id)  # folded from the log, cached, and copied
    aggregate = copy_of_fold(cached)
    new_events = list(repository.event_store.get(originator_id=aggregate_id,
                                                 gt=aggregate.version))
    if not new_events:
        return aggregate
    aggregate = fold_stored(aggregate, new_events)  # a damaged event: UnfoldableEventError
    if aggregate is None:
        raise AggregateNotFoundError(aggregate_id)
    _keep_newer(cache, aggregate_id, copy_of_fold(aggregate))
    return aggregate


def fold_stream(app: Any, aggregate_id: UUID, version: int | None = None) -> Any:
    """The aggregate of any kind folded from stream ``aggregate_id`` (at ``version`` if given;
    else as its last stored event left it, from the process's cache when it holds the stream:
    ``fold_current``), for readers that follow the log (the changefeed);
    writers use ``Changes.load_aggregate``. Raises the library's ``AggregateNotFoundError``
    when there is no such stream, ``StreamGapError`` (``domain.chain``) when its stored events
    skip a version (``version`` itself included, when a later one is stored:
    ``SealCheckingRepository``), ``UnfoldableEventError`` when one cannot be applied
    (``domain.folding``)."""
    if version is None and app.repository.cache is not None:
        return fold_current(app, aggregate_id)
    return app.repository.get(aggregate_id, version=version)


def fold_before(app: Any, aggregate_id: UUID, version: int) -> Any:
    """``fold_stream`` at ``version - 1``, for a reader about to apply the stream's event of
    ``version``; raises ``StreamGapError`` when none of the stream's events before it is
    stored (its first ones were deleted)."""
    try:
        return fold_stream(app, aggregate_id, version - 1)
    except AggregateNotFoundError:
        raise StreamGapError(aggregate_id, version, 0) from None


def _keep_newer(cache: Any, aggregate_id: UUID, aggregate: Any) -> None:
    """Cache ``aggregate`` unless the cache already holds a fold at least as new (loads of
    one stream on two threads may finish in either order)."""
    try:
        if cache.get(aggregate_id).version >= aggregate.version:
            return
    except KeyError:
        pass
    cache.put(aggregate_id, aggregate)
