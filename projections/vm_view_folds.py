"""How ``vm_view`` rows keep a VM's fold (projections/vm_view.py): the folded state written
with each row, its thaw for the next event, and what happens when a row's state cannot be used
(edited behind the service's back). A batch bringing an event a row is already past is the
tracking's error, not the fold's (projections/tracking_behind.py).

The folded state is a ``Vm`` snapshot's state plus ``FOLD_OF``. A row an older version of the
``Vm`` class wrote keeps that version's state (``class_version`` 3 has no ``claimed_servers``),
as every row of a VM with no event since an upgrade does. Its upcast would have to guess what
that version did not keep (``claimed_servers`` from the server and the claim: none for a failed
provision, which claimed one), so the runner does not fold on from it: the VM is folded afresh
from the log, quietly, as a load passes over an older snapshot. ``vmledger audit verify``
compares such a row on the fields its version kept (``said``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Snapshot
from eventsourcing.persistence import Transcoder

from domain.folding import said_fields
from domain.vm import Vm
from projections.formats import uuid_text
from projections.rebuild import SUFFIX as REBUILD_SUFFIX

log = logging.getLogger("vmledger.projections.vm_view")

# The key, in a row's folded state, of the VM and the version it was folded for: a snapshot's
# state names neither (the library's Snapshot.take leaves them out), so another VM's state
# copied into the row was thawed as this VM's and the next event folded onto it (auditor
# tester); with them the runner sees it is not this VM's fold
FOLD_OF = "kept_fold_of"
# Refolds a VM from the log: (vm id, version) -> the Vm at that version
Refold = Callable[[UUID, int], Vm | None]


def said(state: dict[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """A row's folded ``state`` (decoded, ``FOLD_OF`` removed) as the audit compares it: upcast
    to the ``Vm`` class's current version, ``class_version`` the current, less the fields the
    upcasts supplied, which are returned apart (``domain.folding.said_fields``): a row an
    older version wrote is compared on what that version kept. Comparing the whole upcast
    state reported every failed provision's row as "differs from a fresh fold in snapshot"
    after the upgrade to version 6, on an intact database (reviewer); and comparing the bytes
    every row an older version wrote, after the upgrade to version 3 (reviewer)."""
    return said_fields(Vm, state)


class FoldRows:
    """The part of ``VmView`` that thaws and writes a row's folded state (``transcoder``,
    ``refold``, ``name`` and ``table`` are the read model's)."""

    transcoder: Transcoder
    refold: Refold | None
    name: str
    table: Callable[[str], str]

    def _load(self, stored: dict[str, dict[str, Any]], vm_id: UUID, next_version: int
              ) -> Vm | None:
        """The VM's row thawed, to apply its event of ``next_version``; None when it has
        none: this fold met none of the stream's events before (its first were deleted), and
        applying the event to None says so.

        A row whose folded state cannot be thawed, or is not this VM's at the row's version
        (``FOLD_OF``: another VM's state copied into it), was edited behind the service's
        back. The row is derived data and the log is the truth, so the VM is folded afresh
        from the log to the version before the event (``refold``), a warning names the read
        model, the VM and the row, and the batch goes on: the row is written anew from that
        fold. It once wedged every read model (the batch failed on the undecodable state, or
        folded the event onto another VM; auditor tester). ``vmledger audit verify``
        compares every row's folded state with a fresh fold. Without ``refold``
        ``UnusableFoldError`` names them instead.

        A row an older version of the ``Vm`` class wrote is not damage, but its upcast can
        only guess the fields that version did not keep, and a guess folded on stays in the
        row (a failed provision's ``claimed_servers`` stayed empty until ``vmledger rebuild
        vm_view``; reviewer): the VM is folded afresh from the log too, said at INFO. Without
        ``refold`` it is thawed upcast."""
        row = stored.get(uuid_text(vm_id))
        if row is None:
            return None
        version = int(row["version"])
        name = self.name.removesuffix(REBUILD_SUFFIX)
        where = f"row {self.table('vm_view')} {uuid_text(vm_id)} (version {version})"
        try:
            vm, fold_of, written = self.thaw(vm_id, version, bytes(row["snapshot"]))
        except Exception as error:  # noqa: BLE001 - any state that cannot be thawed
            problem = f"cannot be thawed ({type(error).__name__}: {error})"
        else:
            problem = _not_its_fold(fold_of, vm_id, version)
            if problem is None:
                if written >= Vm.class_version or self.refold is None:
                    return vm
                log.info("read model %s: the folded state of VM %s in %s was written by an "
                         "older version of the Vm class (%s, now %s), whose upcast can only "
                         "guess what that version did not keep: the VM is folded afresh from "
                         "the log to version %s and its row written anew", name,
                         uuid_text(vm_id), where, written, Vm.class_version, next_version - 1)
                return self.refold(vm_id, next_version - 1)
        if self.refold is None:
            raise UnusableFoldError(f"read model {name}: the folded state of VM "
                                    f"{uuid_text(vm_id)} in {where} {problem}")
        log.warning("read model %s: the folded state of VM %s in %s %s: the VM is folded "
                    "afresh from the log to version %s and its row written anew (the row was "
                    "edited behind the service's back: vmledger audit verify compares every "
                    "row with a fresh fold)", name, uuid_text(vm_id), where, problem,
                    next_version - 1)
        return self.refold(vm_id, next_version - 1)

    def thaw(self, vm_id: UUID, version: int, blob: bytes) -> tuple[Vm, Any, int]:
        """The aggregate from a row's folded state ``blob`` (upcast), the ``FOLD_OF`` it names
        (None in a row written before it existed) and the class version that wrote it."""
        state = self.transcoder.decode(blob)
        fold_of = state.pop(FOLD_OF, None)
        written = state.get("class_version", 1)
        snapshot = Snapshot(
            originator_id=vm_id,
            originator_version=version,
            timestamp=datetime.now(UTC),
            topic=Vm.TOPIC,
            state=state,
        )
        return snapshot.mutate(None), fold_of, written

    def folded_state(self, vm: Vm) -> bytes:
        """The row's folded state of ``vm``: its snapshot's state, and ``FOLD_OF``."""
        state = Snapshot.take(vm).state
        state[FOLD_OF] = [uuid_text(vm.id), vm.version]
        return self.transcoder.encode(state)


class UnusableFoldError(Exception):
    """A ``vm_view`` row's folded state cannot be used, and no ``refold`` was given."""


def _not_its_fold(fold_of: Any, vm_id: UUID, version: int) -> str | None:
    """Why a row's folded state whose ``FOLD_OF`` is ``fold_of`` is not VM ``vm_id``'s at
    ``version`` (its row's), or None. A row written before ``FOLD_OF`` existed has none and
    is taken as it is."""
    if fold_of is None or fold_of == [uuid_text(vm_id), version]:
        return None
    if isinstance(fold_of, list) and len(fold_of) == 2:
        return f"is the fold of VM {fold_of[0]} at version {fold_of[1]}"
    return f"names no VM and version ({fold_of!r})"
