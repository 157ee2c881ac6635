"""Sealed snapshots: a load starts from a snapshot only if it still matches the log.

A snapshot is outside the hash chain (domain/chain.py), yet commands, time travel and the
console start from it. So a snapshot carries a seal: SHA-256 over its stream, version, topic
and state. A load refuses a snapshot (logs it, and folds from the stream's first event
instead) when the seal is missing or does not match, or when the snapshot's ``chain_head`` is
not the ``chain`` of the stored event at its version. The second check costs nothing extra:
the events after the snapshot are read from its version rather than after it. A snapshot an
older version of its aggregate class took is not used either (quietly, as one from before
seals): its upcast can only guess what that version did not keep (a VM's ``state_since``).

Neither check reads the events before the snapshot, so a gap there (an event deleted) is not
seen by a load that starts from the snapshot; counting them would cost each load a second
query, and ``audit verify`` folds every stream from its first event (docs/operations.md).

The seal is not a secret: it finds edits made without knowing the format, as the chain
does. ``vmledger audit verify`` compares every snapshot with a fresh fold
(service/audit/snapshots.py), which finds any edit.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from itertools import chain as chained
from typing import Any

from eventsourcing.application import AggregateNotFoundError, Repository, project_aggregate
from eventsourcing.domain import Snapshot
from eventsourcing.utils import resolve_topic

from domain.errors import StreamGapError
from domain.folding import fold_stored

SEAL = "snapshot_seal"
NO_SEAL = "it has no seal"
OLDER_CLASS = "an older version of its aggregate took it"
# not signs of an edit: such a snapshot is only not used (its stream is folded instead)
_UNUSED_ONLY = frozenset({NO_SEAL, OLDER_CLASS})

log = logging.getLogger(f"vmledger.{__name__}")


def seal(transcoder: Any, snapshot: Any) -> str:
    """The seal of ``snapshot``: SHA-256 hex over its stream, version, topic and state (as
    the transcoder stores it; a state without the seal: a load takes it out first), in the
    transcoder's canonical JSON (``ReusedEncoderTranscoder.canonical``: sorted keys, ASCII),
    encoded once."""
    content = [str(snapshot.originator_id), snapshot.originator_version, snapshot.topic,
               snapshot.state]
    return hashlib.sha256(transcoder.canonical(content).encode()).hexdigest()


def sealed_snapshot(transcoder: Any, aggregate: Any) -> Any:
    """A snapshot of ``aggregate`` carrying its seal."""
    snapshot = getattr(type(aggregate), "Snapshot", Snapshot).take(aggregate)
    snapshot.state[SEAL] = seal(transcoder, snapshot)
    return snapshot


def take_sealed_snapshot(app: Any, aggregate_id: Any, version: int | None,
                         projector_func: Any) -> None:
    """``Application.take_snapshot``, but the snapshot stored carries its seal."""
    aggregate = app.repository.get(aggregate_id, version=version, projector_func=projector_func)
    app.snapshots.put([sealed_snapshot(app.mapper.transcoder, aggregate)])


def seal_checking(repository: Repository[Any], transcoder: Any) -> SealCheckingRepository:
    """``repository``, made by the library's ``Application.construct_repository`` from the
    application's settings (cache size, fast-forward, deep copies), as a
    ``SealCheckingRepository`` sealing with ``transcoder``.

    eventsourcing 9.5 names ``Repository`` in that method and has no hook for its class, so
    the instance's class is changed rather than the method copied: the subclass only
    overrides a method and adds ``transcoder``, so the library's instance is a complete one."""
    if type(repository) is not Repository:
        raise TypeError(f"not the library's own repository: {type(repository).__name__}")
    repository.__class__ = SealCheckingRepository
    repository.transcoder = transcoder
    return repository


class SealCheckingRepository(Repository[Any]):
    """The library's repository, but a load refuses a snapshot that does not match the log
    (see the module docstring) and folds from the events instead."""

    transcoder: Any = None  # set by ``seal_checking``

    def _reconstruct_aggregate(self, aggregate_id: Any, version: int | None,
                               projector_func: Any) -> Any:
        """The aggregate folded from its stream (at ``version``, if given), every stored
        event applied by ``domain.folding`` (an event the fold cannot apply is damage:
        ``UnfoldableEventError``). Raises ``StreamGapError`` when a fold to ``version`` ends
        before it though the stream goes on (the events up to it were deleted: the library
        would answer the last one before them as that version)."""
        if projector_func is project_aggregate:  # the library's default: every caller's
            projector_func = fold_stored
        aggregate = self._folded(aggregate_id, version, projector_func)
        if version is not None and (aggregate is None or aggregate.version < version):
            self._no_gap_before(aggregate_id, aggregate.version if aggregate else 0, version)
        if aggregate is None:  # as the library's: not the snapshot alone, which was refused
            raise AggregateNotFoundError(f"Aggregate {aggregate_id!r} version {version!r} "
                                         "not found.")
        return aggregate

    def _no_gap_before(self, aggregate_id: Any, folded: int, version: int) -> None:
        """Raise ``StreamGapError`` when the stream has an event after ``version`` although
        a fold to ``version`` ended at ``folded`` (0: no event): each between was deleted.
        A stream that ends at ``folded`` has no ``version``: its callers say so."""
        later = self.event_store.recorder.select_events(aggregate_id, gt=version, limit=1)
        if later:
            raise StreamGapError(aggregate_id, later[0].originator_version, folded)

    def _folded(self, aggregate_id: Any, version: int | None, projector_func: Any) -> Any:
        """The fold of the stream (to ``version``) from its snapshot, if it matches the log,
        else from its first event; None when nothing was folded."""
        if self.snapshot_store is None:
            return projector_func(None, self.event_store.get(originator_id=aggregate_id,
                                                             lte=version))
        snapshots = list(self.snapshot_store.get(originator_id=aggregate_id, desc=True,
                                                 limit=1, lte=version))
        at = snapshots[0].originator_version if snapshots else 0
        # from the snapshot's own version: its event's chain must be the snapshot's head
        events: Iterable[Any] = self.event_store.get(originator_id=aggregate_id,
                                                     gt=at - 1 if at else None, lte=version)
        if snapshots:
            events = list(events)
            # not the aggregate's: the seal is the snapshot's
            recorded = snapshots[0].state.pop(SEAL, None)
            problem = self._problem(snapshots[0], recorded, events[0] if events else None)
            if problem:
                # a snapshot from before seals, or an older class version, is no finding: it
                # is only not used; any other refusal means the snapshot was changed, which
                # an operator should hear of
                level = logging.DEBUG if problem in _UNUSED_ONLY else logging.WARNING
                log.log(level, "snapshot of %s at version %s refused (%s): folding its events "
                        "from the first", aggregate_id, at, problem)
                snapshots = []
                events = chained(self.event_store.get(originator_id=aggregate_id, lte=at - 1),
                                 events)
            else:
                events = events[1:]
        return projector_func(None, chained(snapshots, events))

    def _problem(self, snapshot: Any, recorded: str | None, event: Any) -> str | None:
        """Why ``snapshot`` cannot be trusted (``recorded``: the seal it was stored with, taken
        out of its state; ``event``: the stored event at its version), or None."""
        if recorded is None:
            return NO_SEAL
        # what an older version of the class never kept, its upcast can only guess (a VM's
        # state_since, from which a stuck VM is timed): the fold knows it
        if snapshot.state.get("class_version", 1) < getattr(resolve_topic(snapshot.topic),
                                                            "class_version", 1):
            return OLDER_CLASS
        if recorded != seal(self.transcoder, snapshot):
            return "its seal does not match its content"
        if event is None or event.originator_version != snapshot.originator_version:
            return "the stream has no event at its version"
        if getattr(event, "chain", None) != snapshot.state.get("chain_head"):
            return "its chain head is not the chain of the event at its version"
        return None
