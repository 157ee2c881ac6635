"""Folding stored events: an event the fold cannot apply is damage to its stream, not a
refusal (docs/operations.md, "A damaged stream").

The service appends only events its aggregates decided, so a stored event its aggregate's
fold refuses (``IllegalTransitionError``: a ``Started`` on a running VM), or one of a class
that is no event of that aggregate (a topic edited to a snapshot's, whose ``mutate`` raises
``AttributeError``), was written behind the service's back. Raised as it stands, the
domain's refusal read as the client's (409 ``InvalidTransition`` describing the state the
damage left), anything else as a bug (500), and it stopped every reader that passes over a
damaged stream (``DamagedStreamError``: the change streams, the job worker). Every fold of
stored events applies them here; a new event a command triggers is applied by the
aggregate itself (``trigger_event``), so a refusal of a command stays a refusal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from domain.errors import DamagedStreamError, UnfoldableEventError


def apply_stored(event: Any, aggregate: Any, read_model: str | None = None) -> Any:
    """``aggregate`` (None before the stream's first event) with the stored ``event``
    applied (a snapshot, first, makes it). Raises ``UnfoldableEventError`` naming the stream,
    the version (and ``read_model``, the fold's, if given) for any error applying it raises,
    and for an event that is not one of the aggregate's kind (its class's ``Event``), which
    the library would apply whatever it is; a ``DamagedStreamError`` (a gap:
    ``domain.chain``) as it is."""
    kind = getattr(type(aggregate), "Event", None)
    if aggregate is not None and kind is not None and not isinstance(event, kind):
        raise UnfoldableEventError(
            event.originator_id, event.originator_version,
            TypeError(f"a {type(event).__name__} is no event of a {type(aggregate).__name__}"),
            read_model)
    try:
        return event.mutate(aggregate)
    except DamagedStreamError:
        raise
    except Exception as error:  # any: the stored event is what is wrong, not the fold
        raise UnfoldableEventError(event.originator_id, event.originator_version, error,
                                   read_model) from error


def fold_stored(aggregate: Any, events: Iterable[Any]) -> Any:
    """``aggregate`` with the stored ``events`` applied in turn (``apply_stored``): the
    library's ``project_aggregate``, for every load of a stream (the repository's, the
    cache's fast-forward)."""
    for event in events:
        aggregate = apply_stored(event, aggregate)
    return aggregate


def upcast_state(cls: type, state: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A copy of a stored fold's ``state`` (a snapshot's, a read model's kept fold) upcast by
    ``cls``'s ``upcast_vN_vN+1`` methods from the class version it was written at
    (``class_version``, 1 when absent) to ``cls``'s, and the version it reached (the
    written one when that is newer: nothing downcasts). The loop of eventsourcing 9.5's
    ``Snapshot.mutate`` (``CanSnapshotAggregate.mutate``), which a load runs, restated for
    those that want the state alone, field by field; ``class_version`` is left as written,
    for the caller to set. If a library upgrade changes its loop, this must follow:
    tests/integration/test_audit_snapshots.py checks the two agree."""
    upcast = dict(state)
    version = upcast.get("class_version", 1)
    current = getattr(cls, "class_version", 1)
    while version < current:
        getattr(cls, f"upcast_v{version}_v{version + 1}")(upcast)
        version += 1
    return upcast, version


def said_fields(cls: type, state: dict[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """What a stored fold's ``state`` (a snapshot's, a read model's kept fold) says, as a
    load reads it, and the fields it never said. Upcast to ``cls``'s class version
    (``upcast_state``), ``class_version`` that version; the fields the upcasts added are left
    out and returned apart: they are the upcasts' guesses (a VM's ``claimed_servers`` before
    version 6, from its server and claim, is none for a failed provision, which claimed one),
    so only a fold of the log knows them. Every field the state did say is kept, upcast. The
    audit compares an older fold with a fresh one on those fields alone
    (service/audit/snapshots.py, service/audit/verify.py ``compare``)."""
    upcast, _ = upcast_state(cls, state)
    current = getattr(cls, "class_version", 1)
    if current > 1:
        upcast["class_version"] = current
    supplied = frozenset(key for key in upcast if key not in state)
    return {k: v for k, v in upcast.items() if k not in supplied}, supplied
