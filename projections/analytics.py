"""``analytics``: plain SQL tables for analysts (docs/analytics.md, column by column).

Two tables, written together at one tracking position:

- ``vm_transitions``: one row per state-changing event (``domain.transitions.STATE_EVENTS``):
  the state before and after, when, how long the VM had been in the state it left, where,
  whose, and why (for failures: ``evicted``, ``crashed``, ``provision_failed``).
- ``vm_current``: one row per VM: its state now and since when, its owner, and the server
  its VM object shows (``Vm.shown_server_uuid``: the one it is on, else the one it claimed).

The state after each event comes from the domain's own transition table
(``transitions.after``), so these tables cannot drift from the aggregate; an event the table
does not allow from the stored state (a missed event) fails loudly. Times are kept twice: as
RFC 3339 UTC text with milliseconds (``at``, ``since``: readable, sortable, and
``SUBSTR(at, 1, 13)`` is the hour) and as Unix epoch milliseconds (``at_ms``, ``since_ms``:
arithmetic); durations are whole milliseconds (``ms_in_from``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from domain import transitions
from domain.states import VmState
from domain.stuck import starts_anew
from domain.vm import Vm
from projections.db import Database, Tx
from projections.formats import epoch_ms, rfc3339, uuid_text
from projections.runner import ReadModel

TRANSITION_COLUMNS = (
    "vm_uuid", "version", "position", "event_type", "from_state", "to_state", "at", "at_ms",
    "ms_in_from", "server_uuid", "owner_uuid", "reason", "message", "actor", "job_uuid",
)
CURRENT_COLUMNS = (
    "vm_uuid", "state", "since", "since_ms", "owner_uuid", "server_uuid", "quarantined_from",
    "version", "position", "on_server_uuid", "claim_server_uuid", "released_server_uuid",
    "created", "created_state",
)
# The events that move a VM's claim on a server (no state change): the server the VM object
# shows while it is on none (``Vm.shown_server_uuid``).
CLAIM_EVENTS = frozenset({"CapacityClaimed", "CapacityReleased"})


def _loaded(stored: dict[str, dict[str, Any]], vm_uuid: str) -> dict[str, Any]:
    row = stored.get(vm_uuid)
    if row is None:
        raise LookupError(f"vm_current has no row for {vm_uuid}: an event was missed")
    return row


def _failure(event: Any) -> tuple[str | None, str | None]:
    """The (reason, message) an event records: failures and quarantines say why."""
    if isinstance(event, Vm.ProvisionFailed):
        return "provision_failed", event.error
    return getattr(event, "reason", None), getattr(event, "message", None)


class AnalyticsView(ReadModel):
    """``vm_transitions`` (one row per state change) and ``vm_current`` (one row per VM)."""

    name = "analytics"
    blind_writes = True
    tables = ("vm_transitions", "vm_current")

    def create_statements(self, db: Database) -> list[str]:
        moves, now, index = self.table("vm_transitions"), self.table("vm_current"), self.index
        return [
            (f"CREATE TABLE IF NOT EXISTS {moves} ("
             "vm_uuid TEXT NOT NULL, version INTEGER NOT NULL, position BIGINT NOT NULL, "
             "event_type TEXT NOT NULL, from_state TEXT NOT NULL, to_state TEXT NOT NULL, "
             "at TEXT NOT NULL, at_ms BIGINT NOT NULL, ms_in_from BIGINT NOT NULL, "
             "server_uuid TEXT, owner_uuid TEXT NOT NULL, reason TEXT, message TEXT, "
             "actor TEXT, job_uuid TEXT, PRIMARY KEY (vm_uuid, version))"),
            (f"CREATE INDEX IF NOT EXISTS {index('vm_transitions_pair')} "
             f"ON {moves} (from_state, to_state)"),
            (f"CREATE INDEX IF NOT EXISTS {index('vm_transitions_to')} "
             f"ON {moves} (to_state, reason, server_uuid)"),
            f"CREATE INDEX IF NOT EXISTS {index('vm_transitions_owner')} ON {moves} (owner_uuid)",
            (f"CREATE TABLE IF NOT EXISTS {now} ("
             "vm_uuid TEXT PRIMARY KEY, state TEXT NOT NULL, since TEXT NOT NULL, "
             "since_ms BIGINT NOT NULL, owner_uuid TEXT NOT NULL, server_uuid TEXT, "
             "quarantined_from TEXT, version INTEGER NOT NULL, position BIGINT NOT NULL, "
             "on_server_uuid TEXT, claim_server_uuid TEXT, released_server_uuid TEXT, "
             "created TEXT NOT NULL, created_state TEXT NOT NULL)"),
            f"CREATE INDEX IF NOT EXISTS {index('vm_current_state')} ON {now} (state, since_ms)",
            f"CREATE INDEX IF NOT EXISTS {index('vm_current_owner')} ON {now} (owner_uuid, state)",
            (f"CREATE INDEX IF NOT EXISTS {index('vm_current_server')} "
             f"ON {now} (server_uuid, state)"),
            # covers the console's chart of the fleet's creations by time and first state
            # (one owner's are found through vm_current_owner)
            (f"CREATE INDEX IF NOT EXISTS {index('vm_current_created')} "
             f"ON {now} (created, created_state)"),
        ]

    def read(self, tx: Tx, events: Sequence[tuple[int, Any]]
             ) -> Callable[[], dict[str, dict[str, Any]]]:
        created = {e.originator_id for _, e in events if isinstance(e, Vm.Created)}
        return tx.submit_rows_by_key(self.table("vm_current"), "vm_uuid", {
            uuid_text(e.originator_id) for _, e in events
            if isinstance(e, Vm.Event) and _changes_row(type(e).__name__)
            and e.originator_id not in created})  # a VM created in the batch has no row yet

    def write(self, tx: Tx, events: Sequence[tuple[int, Any]],
              stored: dict[str, dict[str, Any]]) -> None:
        current: dict[str, dict[str, Any]] = {}  # this batch's VMs, written once at the end
        moves: list[dict[str, Any]] = []  # this batch's state changes, in log order
        for position, event in events:
            if not isinstance(event, Vm.Event):
                continue
            vm_uuid = uuid_text(event.originator_id)
            if isinstance(event, Vm.Created):
                current[vm_uuid] = self._created(vm_uuid, position, event)
                continue
            kind = type(event).__name__
            if not _changes_row(kind):
                continue
            vm = current.get(vm_uuid) or _loaded(stored, vm_uuid)
            if kind in CLAIM_EVENTS:
                current[vm_uuid] = _claim_moved(vm, position, event)
            else:
                current[vm_uuid] = self._transition(moves, vm, position, kind, event)
        tx.executemany(
            f"INSERT INTO {self.table('vm_transitions')} ({', '.join(TRANSITION_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(TRANSITION_COLUMNS))})",
            [[row[c] for c in TRANSITION_COLUMNS] for row in moves],
        )
        updates = ", ".join(f"{c} = excluded.{c}" for c in CURRENT_COLUMNS[1:])
        tx.executemany(
            f"INSERT INTO {self.table('vm_current')} ({', '.join(CURRENT_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(CURRENT_COLUMNS))}) "
            f"ON CONFLICT (vm_uuid) DO UPDATE SET {updates}",
            [[vm[c] for c in CURRENT_COLUMNS] for vm in current.values()],
        )

    @staticmethod
    def _created(vm_uuid: str, position: int, event: Any) -> dict[str, Any]:
        # A VM its agent found (Vm.Discovered) starts in the state it was found in, on the
        # server it was found on; ``created_state`` keeps that first state for counts over
        # time (no transition row records it).
        server_uuid = getattr(event, "server_uuid", None)
        state = getattr(event, "state", VmState.PROVISIONING.value)
        return {
            "vm_uuid": vm_uuid, "state": state,
            "since": rfc3339(event.timestamp), "since_ms": epoch_ms(event.timestamp),
            "owner_uuid": event.owner_uuid, "server_uuid": server_uuid,
            "quarantined_from": None,
            "version": event.originator_version, "position": position,
            "on_server_uuid": server_uuid, "claim_server_uuid": None,
            "released_server_uuid": None,
            "created": rfc3339(event.timestamp), "created_state": state,
        }

    @staticmethod
    def _transition(moves: list[dict[str, Any]], vm: dict[str, Any], position: int, kind: str,
                    event: Any) -> dict[str, Any]:
        """Add one state change's ``vm_transitions`` row to ``moves``; return the VM's
        ``vm_current`` row after it."""
        before = VmState(vm["state"])
        previous = VmState(vm["quarantined_from"]) if vm["quarantined_from"] else None
        has_server = vm["on_server_uuid"] is not None  # the rules table's: on a server
        if before is VmState.QUARANTINED and kind in transitions.ADOPTED_WHILE_QUARANTINED:
            # the fence job adopting what a canceled job did: still quarantined, to be given
            # back in the state the event leads to (the domain's rule, ``Vm.quarantine``)
            after = before
            previous = transitions.while_quarantined(previous, kind, has_server=has_server)
        else:
            after = transitions.after(before, kind, previous, has_server=has_server)
        at_ms = epoch_ms(event.timestamp)
        on_server = getattr(event, "server_uuid", None) or vm["on_server_uuid"]
        shown = on_server or vm["claim_server_uuid"]  # as the VM object shows it
        # where it happened: the server shown, or the claim this event's save gave back
        # first (a failed provision, a failure or a destroy releases it before the event)
        server_uuid = shown or vm["released_server_uuid"]
        reason, message = _failure(event)
        cause = getattr(event, "cause", None) or {}
        row = {
            "vm_uuid": vm["vm_uuid"], "version": event.originator_version,
            "position": position, "event_type": kind, "from_state": before.value,
            "to_state": after.value, "at": rfc3339(event.timestamp), "at_ms": at_ms,
            "ms_in_from": at_ms - int(vm["since_ms"]), "server_uuid": server_uuid,
            "owner_uuid": vm["owner_uuid"], "reason": reason, "message": message,
            "actor": cause.get("actor"), "job_uuid": cause.get("job_uuid"),
        }
        moves.append(row)
        # a reboot stays in running: "since" does not move (the domain's rule: stuck.py)
        changed = starts_anew(before, after)
        return {
            **vm,
            "state": after.value,
            "since": row["at"] if changed else vm["since"],
            "since_ms": at_ms if changed else vm["since_ms"],
            "server_uuid": shown,
            "on_server_uuid": on_server,
            "released_server_uuid": None,
            "quarantined_from": (previous.value if before is VmState.QUARANTINED else before.value)
            if after is VmState.QUARANTINED else None,
            "version": event.originator_version,
            "position": position,
        }


def _changes_row(kind: str) -> bool:
    """Whether an event of type ``kind`` changes the VM's ``vm_current`` row (a state change
    or a claim moved; ``Created`` aside)."""
    return kind in transitions.STATE_EVENTS or kind in CLAIM_EVENTS


def _claim_moved(vm: dict[str, Any], position: int, event: Any) -> dict[str, Any]:
    """The VM's ``vm_current`` row after a ``CapacityClaimed`` or ``CapacityReleased``: the
    server it shows is its own, else the one it holds a claim on (``Vm.shown_server_uuid``),
    and a claim given back is kept as ``released_server_uuid`` until the next state change,
    which it names if the VM shows no server then (the provision that failed there)."""
    claimed = isinstance(event, Vm.CapacityClaimed)
    claim = event.server_uuid if claimed else None
    return {
        **vm,
        "server_uuid": vm["on_server_uuid"] or claim,
        "claim_server_uuid": claim,
        "released_server_uuid": vm["released_server_uuid"] if claimed else event.server_uuid,
        "version": event.originator_version,
        "position": position,
    }
