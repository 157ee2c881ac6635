"""Queries over the ``analytics`` tables for ``/stats/*`` (api.md; docs/analytics.md).

Every query runs on SQLite and PostgreSQL alike: plain ``GROUP BY`` counts, and percentiles
computed here by the nearest-rank method (the same the SQL in docs/analytics.md uses), so both
backends give the same numbers. Values are always bound parameters.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from domain.states import TRANSIENT_STATES, VmState
from projections.db import Database

PERCENTILES = (50, 90, 99)
STATE_ORDER = tuple(state.value for state in VmState)


# The events that are failures (docs/analytics.md, "A failure"): each moves a VM into
# ``failed`` for a reason of its own, where ``Released`` only gives a quarantined VM back.
FAILURES = ("Failed", "ProvisionFailed")


def nearest_rank(ordered: list[int], percent: int) -> int | None:
    """The ``percent``-th percentile of ``ordered`` (ascending) by the nearest-rank method:
    the smallest value with at least ``percent`` % of the values at or below it."""
    if not ordered:
        return None
    rank = -(-percent * len(ordered) // 100)  # ceil(percent / 100 * n), in integers
    return ordered[max(rank, 1) - 1]


def durations_between(rows: Iterable[dict[str, Any]], from_state: str,
                      to_state: str) -> list[int]:
    """Milliseconds from entering ``from_state`` to next entering ``to_state``, once per such
    pair, from ``vm_transitions`` rows ordered by (vm_uuid, version). A VM that enters
    ``from_state`` again before reaching ``to_state`` is measured from its latest entry."""
    found: list[int] = []
    vm_uuid, entered = None, None
    for row in rows:
        if row["vm_uuid"] != vm_uuid:
            vm_uuid, entered = row["vm_uuid"], None
        if row["from_state"] == from_state:  # leaving it: the visit began ms_in_from ago
            entered = int(row["at_ms"]) - int(row["ms_in_from"])
        if row["to_state"] == to_state and entered is not None:
            found.append(int(row["at_ms"]) - entered)
            entered = None
    return found


@dataclass(frozen=True)
class Durations:
    """How long VMs took from entering one state to entering another (milliseconds)."""

    from_state: str
    to_state: str
    values: list[int]

    def as_dict(self) -> dict[str, Any]:
        """``{from, to, count, p50_ms, p90_ms, p99_ms, max_ms}`` (None when count is 0)."""
        ordered = sorted(self.values)
        summary: dict[str, Any] = {"from": self.from_state, "to": self.to_state,
                                   "count": len(ordered)}
        for percent in PERCENTILES:
            summary[f"p{percent}_ms"] = nearest_rank(ordered, percent)
        summary["max_ms"] = ordered[-1] if ordered else None
        return summary


def _nulls_first(key: str | None) -> tuple[bool, str]:
    return (key is not None, key or "")


class AnalyticsQueries:
    """Read-only queries of ``vm_transitions`` and ``vm_current``."""

    def __init__(self, db: Database):
        self.db = db

    def _rows(self, statement: str, params: list[Any]) -> list[dict[str, Any]]:
        with self.db.transaction(commit=False) as tx:
            tx.execute(statement, params)
            return tx.fetchall()

    @staticmethod
    def _owner(owner_uuid: str | None, joiner: str = "WHERE") -> tuple[str, list[Any]]:
        if owner_uuid is None:
            return "", []
        return f" {joiner} owner_uuid = ?", [owner_uuid]

    def states(self, owner_uuid: str | None = None) -> dict[str, int]:
        """How many VMs are in each state now (every state, zeros included)."""
        where, params = self._owner(owner_uuid)
        rows = self._rows(
            f"SELECT state, COUNT(*) AS n FROM vm_current{where} GROUP BY state", params)
        counts = dict.fromkeys(STATE_ORDER, 0)
        counts.update({row["state"]: int(row["n"]) for row in rows})
        return counts

    def states_by(self, key: str, owner_uuid: str | None = None) -> list[dict[str, Any]]:
        """Counts by state for each owner (``key="owner_uuid"``) or last server
        (``"server_uuid"``; null for VMs never placed): ``[{key, total, states}]``."""
        assert key in ("owner_uuid", "server_uuid")
        where, params = self._owner(owner_uuid)
        rows = self._rows(
            f"SELECT {key} AS k, state, COUNT(*) AS n FROM vm_current{where} "
            f"GROUP BY {key}, state", params)
        groups: dict[str | None, dict[str, int]] = {}
        for row in rows:
            groups.setdefault(row["k"], dict.fromkeys(STATE_ORDER, 0))[row["state"]] = int(
                row["n"])
        return [{key: k, "total": sum(states.values()), "states": states}
                for k, states in sorted(groups.items(), key=lambda item: _nulls_first(item[0]))]

    def transitions(self, owner_uuid: str | None = None) -> list[dict[str, Any]]:
        """How many times VMs went from one state to another: ``[{from, to, count}]``,
        most frequent first."""
        where, params = self._owner(owner_uuid)
        rows = self._rows(
            f"SELECT from_state, to_state, COUNT(*) AS n FROM vm_transitions{where} "
            "GROUP BY from_state, to_state", params)
        pairs = [{"from": r["from_state"], "to": r["to_state"], "count": int(r["n"])}
                 for r in rows]
        return sorted(pairs, key=lambda p: (-p["count"], p["from"], p["to"]))

    def durations(self, from_state: str, to_state: str,
                  owner_uuid: str | None = None) -> Durations:
        """Time from entering ``from_state`` to entering ``to_state`` (see
        ``durations_between``), over every VM."""
        where, params = self._owner(owner_uuid, "AND")
        rows = self._rows(
            "SELECT vm_uuid, from_state, to_state, at_ms, ms_in_from FROM vm_transitions "
            f"WHERE (from_state = ? OR to_state = ?){where} ORDER BY vm_uuid, version",
            [from_state, to_state, *params])
        return Durations(from_state, to_state, durations_between(rows, from_state, to_state))

    def failures(self, key: str, owner_uuid: str | None = None) -> list[dict[str, Any]]:
        """Failures (``FAILURES``: a ``Released`` back into ``failed`` is a transition into
        it, not a failure; docs/analytics.md) counted by ``reason`` or ``server_uuid`` (the
        server the VM failed on; null for a provision that failed before any server had it),
        most frequent first: ``[{key, count}]``."""
        assert key in ("reason", "server_uuid")
        where, params = self._owner(owner_uuid, "AND")
        rows = self._rows(
            f"SELECT {key} AS k, COUNT(*) AS n FROM vm_transitions "
            f"WHERE event_type IN ({', '.join('?' * len(FAILURES))}){where} GROUP BY {key}",
            [*FAILURES, *params])
        counted = [{key: r["k"], "count": int(r["n"])} for r in rows]
        return sorted(counted, key=lambda c: (-c["count"], _nulls_first(c[key])))

    def stuck(self, older_than_ms: int, now_ms: int, *, owner_uuid: str | None = None,
              limit: int = 1000, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """VMs in a transient state (``domain.states.TRANSIENT_STATES``) for ``older_than_ms``
        or more at ``now_ms`` (epoch ms), longest first (then by uuid: a stable order to page
        through), up to ``limit`` after the first ``offset``; and how many there are in
        all."""
        states = sorted(state.value for state in TRANSIENT_STATES)
        where, params = self._owner(owner_uuid, "AND")
        condition = f"state IN ({', '.join('?' * len(states))}) AND since_ms <= ?{where}"
        values = [*states, now_ms - older_than_ms, *params]
        total = self._rows(f"SELECT COUNT(*) AS n FROM vm_current WHERE {condition}", values)
        rows = self._rows(
            "SELECT vm_uuid, state, since, since_ms, owner_uuid, server_uuid FROM vm_current "
            f"WHERE {condition} ORDER BY since_ms, vm_uuid LIMIT ? OFFSET ?",
            [*values, limit, offset])
        stuck = [{"vm_uuid": r["vm_uuid"], "state": r["state"], "since": r["since"],
                  "ms_in_state": now_ms - int(r["since_ms"]), "owner_uuid": r["owner_uuid"],
                  "server_uuid": r["server_uuid"]} for r in rows]
        return stuck, int(total[0]["n"])
