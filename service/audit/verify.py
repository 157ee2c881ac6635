"""``vmledger audit verify``: replay every stream and check its hash chain (design.md,
"Auditing"), and what its other checks share: snapshots (service/audit/snapshots.py) and
read models (service/audit/read_models.py) are compared with fresh folds of the log.

Each difference names the stream (or read-model row) and the version where it was found
(``service.audit.findings``); the chains are checked by ``service.audit.chains``.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from eventsourcing.persistence import Notification

from service.audit.chains import ChainCheck
from service.audit.findings import Difference, check_class, stored_fields  # noqa: F401 - theirs
from service.commands.application import VmLedger
from service.storage import select_outside

BATCH = 1000


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


def verify_chains(app: VmLedger, progress: Callable[[int], None] | None = None
                  ) -> list[Difference]:
    """Check every stream's versions are contiguous from 1 and every event's ``chain``, in
    log order (``service.audit.chains``: the findings name the edited rows), those at
    positions outside the log (0 or below) first: the log's reads by position skip them,
    and each was reported ``missing`` (auditor tester)."""
    check = ChainCheck(app)
    for stored in select_outside(app.recorder):  # before the log's first position
        check.add(stored)
    count = 0
    for count, stored in enumerate(notifications(app), start=1):
        if progress and count % BATCH == 0:
            progress(BATCH)
        check.add(stored)
    if progress and count % BATCH:
        progress(count % BATCH)
    return check.findings()


class OlderFold(str):
    """A kept fold an older version of the ``Vm`` class wrote, as the audit compares it: the
    canonical JSON of what it said (``projections.vm_view_folds.said``), and the fields the
    upcasts ``supplied``, left out of the fresh fold it is compared with (``compare``)."""

    supplied: frozenset[str]

    def __new__(cls, text: str, supplied: frozenset[str]) -> OlderFold:
        made = super().__new__(cls, text)
        made.supplied = supplied
        return made


def comparable(row: dict[str, Any], transcoder: Any) -> dict[str, Any]:
    """``row`` as the audit compares it: a bytes column (a kept fold: ``vm_view``'s
    ``snapshot``, which the runner folds a VM's next event onto) decoded by ``transcoder`` and
    in its canonical JSON, less ``FOLD_OF`` (what the runner checks it against the row's
    uuid and version; a row written before it has none), or ``undecodable`` with the error.
    The fold is compared upcast to the ``Vm`` class's current version, on the fields it said
    (``projections.vm_view_folds.said``): a row an older version wrote (class version 3, no
    ``claimed_servers``) is compared with a fresh fold on the fields that version kept
    (``OlderFold``), as an older snapshot is (service/audit/snapshots.py). The fields its
    upcasts supply are guesses the runner does not fold on from (it folds such a VM afresh
    from the log): compared, they reported a failed provision's row as edited on an intact
    upgraded database (reviewer). An edited field it said is still found.

    Such columns were left out as derived from the rendered ones, while the runner derives
    the rendered ones from them: an edited one passed the audit and wedged every read model
    (auditor tester)."""
    from projections.vm_view_folds import FOLD_OF, said

    plain = {}
    for column, value in row.items():
        if isinstance(value, bytes | memoryview):
            try:
                state = transcoder.decode(bytes(value))
                supplied: frozenset[str] = frozenset()
                if isinstance(state, dict):
                    state.pop(FOLD_OF, None)
                    state, supplied = said(state)
                value = transcoder.canonical(state)
                if supplied:
                    value = OlderFold(value, supplied)
            except Exception as error:  # noqa: BLE001 - an undecodable column differs
                value = f"undecodable: {type(error).__name__}"
        plain[column] = value
    return plain


def _as_older(have: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """The fresh row ``want`` less the fields each ``OlderFold`` column of the live row
    ``have`` never said. Canonical JSON is ``json.dumps`` with sorted keys, compact and
    ASCII only (``ReusedEncoderTranscoder.canonical``), so the fresh fold's text read back
    and written again without those fields is the canonical JSON of the rest."""
    narrowed = dict(want)
    for column, value in have.items():
        fresh = want.get(column)
        if isinstance(value, OlderFold) and isinstance(fresh, str):
            try:
                state = json.loads(fresh)
            except ValueError:
                continue
            if isinstance(state, dict):
                narrowed[column] = json.dumps(
                    {k: v for k, v in state.items() if k not in value.supplied},
                    sort_keys=True, separators=(",", ":"))
    return narrowed


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
    found = (compare_row(table, key, live.get(key), fresh.get(key))
             for key in sorted(set(live) | set(fresh)))
    return [difference for difference in found if difference is not None]


def compare_row(table: str, key: str, have: dict[str, Any] | None,
                want: dict[str, Any] | None) -> Difference | None:
    """The difference between the live row ``have`` and the fresh fold's ``want`` of a
    read-model table's row ``key`` (either None when absent; ``compare``), or None."""
    version = (want or have or {}).get("version")
    where = f"{table} row {key}"
    if have is None:
        return Difference(where, version, "read model",
                          "missing from the read model, present in a fresh fold")
    if want is None:
        return Difference(where, version, "read model",
                          "present in the read model, absent from a fresh fold")
    if have != (want := _as_older(have, want)):
        columns = sorted(c for c in set(have) | set(want) if have.get(c) != want.get(c))
        return Difference(where, version, "read model",
                          f"differs from a fresh fold in {', '.join(columns)}")
    return None
