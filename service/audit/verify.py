"""``vmledger audit verify``: replay every stream and check its hash chain (design.md,
"Auditing"), and what its other checks share: snapshots (service/audit/snapshots.py) and
read models (service/audit/read_models.py) are compared with fresh folds of the log.

Each difference names the stream (or read-model row) and the version where it was found.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Mapper, Notification
from eventsourcing.utils import resolve_topic

from domain import chain
from service.commands.application import VmLedger

BATCH = 1000


@dataclass(frozen=True)
class Difference:
    """One thing that did not hold: where (stream or read-model row, version) and what."""

    where: str
    version: int | None
    kind: str
    detail: str

    def __str__(self) -> str:
        at = f" version {self.version}" if self.version is not None else ""
        return f"{self.kind}: {self.where}{at}: {self.detail}"


def notifications(app: VmLedger, *, start: int = 0, stop: int | None = None
                  ) -> Iterator[Notification]:
    """Every stored event in log order after position ``start`` (up to position ``stop``),
    read in batches."""
    position = start
    while True:
        batch = app.recorder.select_notifications(position, BATCH, stop=stop,
                                                  inclusive_of_start=False)
        if not batch:
            return
        yield from batch
        position = batch[-1].id


def stored_fields(mapper: Mapper[Any], stored: Notification) -> dict[str, Any]:
    """An event's fields exactly as they were written: decoded, but not upcast."""
    state = stored.state
    if mapper.cipher:
        state = mapper.cipher.decrypt(state)
    if mapper.compressor:
        state = mapper.compressor.decompress(state)
    return mapper.transcoder.decode(state)


def verify_chains(app: VmLedger, progress: Callable[[int], None] | None = None
                  ) -> list[Difference]:
    """Check every stream's versions are contiguous from 1 and every event's ``chain``."""
    differences: list[Difference] = []
    heads: dict[UUID, tuple[int, str | None]] = {}
    count = 0
    for count, stored in enumerate(notifications(app), start=1):
        if progress and count % BATCH == 0:
            progress(BATCH)
        differences += check_link(app, stored, heads)
    if progress and count % BATCH:
        progress(count % BATCH)
    return moved_not_missing(differences)


def check_link(app: VmLedger, stored: Notification,
               heads: dict[UUID, tuple[int, str | None]]) -> list[Difference]:
    """Check one stored event against its stream's head so far (``heads``: stream → (version,
    chain hash, None when it could not be read), updated here): its version follows the
    head's and its ``chain`` links it.

    An event whose version is not above the head's was moved in the log (its position
    edited): it is named ``out of order`` and the head stays. An event after one that could
    not be decoded, or after a gap, links to one that cannot be checked: the undecodable event
    or the gap is the finding, and the chain is checked on from this event's own link."""
    stream = stored.originator_id
    version, previous = heads.get(stream, (0, chain.GENESIS))
    where = f"stream {stream}"
    if stored.originator_version <= version:
        return [Difference(where, stored.originator_version, "out of order",
                           f"at position {stored.id}, after version {version} in the log "
                           "(its position was changed)")]
    differences = []
    gap = stored.originator_version != version + 1
    if gap:
        differences.append(Difference(
            where, version + 1, "missing",
            f"the stream goes from version {version} to {stored.originator_version}"))
    try:
        fields = stored_fields(app.mapper, stored)
    except Exception as error:  # noqa: BLE001 - any undecodable event is a finding
        differences.append(Difference(where, stored.originator_version, "undecodable",
                                      f"{type(error).__name__}: {error}"))
        heads[stream] = (stored.originator_version, None)
        return differences
    differences += _check_class(where, stored, fields)
    recorded = fields.get("chain")
    expected = chain.link(previous, stream, stored.originator_version, stored.topic,
                          fields) if previous is not None else None
    if recorded != expected and not gap and previous is not None:
        differences.append(Difference(
            where, stored.originator_version, "tampered",
            "the event's content or its link to the previous event was changed"))
    heads[stream] = (stored.originator_version, recorded or expected)
    return differences


def moved_not_missing(differences: list[Difference]) -> list[Difference]:
    """``differences`` without a ``missing`` finding for a version found later ``out of
    order``: that event was moved, not removed."""
    moved = {(d.where, d.version) for d in differences if d.kind == "out of order"}
    return [d for d in differences
            if not (d.kind == "missing" and (d.where, d.version) in moved)]


def _check_class(where: str, stored: Notification, fields: dict[str, Any]
                 ) -> list[Difference]:
    """An event whose topic names no event class, or whose ``class_version`` is newer than
    its class's: neither is covered by the chain (docs/events.md), and the mapper would read
    the one not at all and the other without upcasting it."""
    try:
        cls = resolve_topic(stored.topic)
    except Exception as error:  # noqa: BLE001 - TopicError, or a topic naming no class
        return [Difference(where, stored.originator_version, "unknown topic",
                           f"{stored.topic!r} names no event class: {error}")]
    stored_version = fields.get("class_version", 1)
    current = getattr(cls, "class_version", 1)
    if not isinstance(stored_version, int) or stored_version > current:
        return [Difference(where, stored.originator_version, "class version",
                           f"class_version {stored_version!r} is newer than {stored.topic}'s "
                           f"({current})")]
    return []


def comparable(row: dict[str, Any], transcoder: Any) -> dict[str, Any]:
    """``row`` as the audit compares it: a bytes column (a kept fold: ``vm_view``'s
    ``snapshot``, which the runner folds a VM's next event onto) decoded by ``transcoder`` and
    in its canonical JSON, less ``FOLD_OF`` (what the runner checks it against the row's
    uuid and version; a row written before it has none), or ``undecodable`` with the error.

    Such columns were left out as derived from the rendered ones, while the runner derives
    the rendered ones from them: an edited one passed the audit and wedged every read model
    (auditor tester)."""
    from projections.vm_view import FOLD_OF

    plain = {}
    for column, value in row.items():
        if isinstance(value, bytes | memoryview):
            try:
                state = transcoder.decode(bytes(value))
                if isinstance(state, dict):
                    state.pop(FOLD_OF, None)
                value = transcoder.canonical(state)
            except Exception as error:  # noqa: BLE001 - an undecodable column differs
                value = f"undecodable: {type(error).__name__}"
        plain[column] = value
    return plain


def scratch_directory() -> Path:
    """Where fresh folds are built (removed by the caller)."""
    return Path(tempfile.mkdtemp(prefix="vmledger-audit-"))


def compare(table: str, live: dict[str, dict[str, Any]], fresh: dict[str, dict[str, Any]]
             ) -> list[Difference]:
    """The differences between a read-model table's ``live`` rows and a ``fresh`` fold's
    (by key, each ``comparable``).

    Values are compared with ``==``, unlike snapshots' fields (service/audit/snapshots.py):
    the read models' columns are TEXT (JSON kept as text) or integers, whose column type fixes
    what a stored value is on both backends, so no edit changes only a value's type."""
    differences = []
    for key in sorted(set(live) | set(fresh)):
        have, want = live.get(key), fresh.get(key)
        version = (want or have or {}).get("version")
        where = f"{table} row {key}"
        if have is None:
            differences.append(Difference(where, version, "read model", "missing from the "
                                          "read model, present in a fresh fold"))
        elif want is None:
            differences.append(Difference(where, version, "read model", "present in the read "
                                          "model, absent from a fresh fold"))
        elif have != want:
            columns = sorted(c for c in set(have) | set(want) if have.get(c) != want.get(c))
            differences.append(Difference(where, version, "read model",
                                          f"differs from a fresh fold in {', '.join(columns)}"))
    return differences
