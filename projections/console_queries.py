"""Queries the web console's pages need beyond GetVm/ListVms and ``/stats`` (docs/console.md).

Every figure is aggregated or paginated in SQL over the read models' indexed columns, so a
page costs the same for ten VMs as for the whole trace shard's 196,585 (bench/console_pages.py
measures it): counts are ``GROUP BY`` over covering indexes, lists are ``LIMIT``-ed, and the
over-time chart sums per-bucket counts in Python over at most ``MAX_BUCKETS`` buckets.
Values are always bound parameters; table and column names are fixed here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from domain.states import Execution
from projections.analytics_queries import STATE_ORDER
from projections.db import Database
from projections.vm_queries import VmFilter

# RFC 3339 prefixes as time buckets (docs/analytics.md, "Times"): the finest whose number of
# buckets over the fleet's lifetime stays within MAX_BUCKETS (a year's prefix is the coarsest:
# a life of more than 120 years draws a point a year).
# (name, prefix length, seconds; None: a calendar month or year, counted as such)
BUCKETS = (("second", 19, 1), ("ten seconds", 18, 10), ("minute", 16, 60),
           ("ten minutes", 15, 600), ("hour", 13, 3600), ("day", 10, 86400),
           ("month", 7, None), ("year", 4, None))
MAX_BUCKETS = 120
UNFINISHED = (Execution.QUEUED.value, Execution.RUNNING.value)
# what a bucket's prefix stands for: the start of the bucket (RFC 3339, UTC)
_EPOCH = "0001-01-01T00:00:00"


@dataclass(frozen=True)
class StatesOverTime:
    """VMs in each state at the end of each bucket: ``points`` is ``[(bucket, {state: n})]``
    oldest first, one for each bucket in which a count changed (none for a quiet bucket),
    ``bucket`` an RFC 3339 prefix of ``unit`` (e.g. ``2026-11-30T01:3`` for ten minutes)."""

    unit: str
    points: list[tuple[str, dict[str, int]]]


def bucket_start(bucket: str) -> datetime:
    """When a bucket (an RFC 3339 prefix, ``2026-11-30T01:3``) starts: 01:30:00 UTC."""
    return datetime.fromisoformat(bucket + _EPOCH[len(bucket):] + "Z")


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)  # Python 3.11 reads RFC 3339's "Z"


def _buckets_over(first: datetime, last: datetime, seconds: int | None, length: int) -> int:
    """How many buckets of ``seconds`` (a calendar month or year: None, by ``length``) the
    instants from ``first`` to ``last`` fall in, both ends' included: UTC's days, hours and
    tens of minutes start at multiples of their length from the epoch, so the count is the
    difference of the epoch's multiples."""
    if seconds is not None:
        return int(last.timestamp() // seconds - first.timestamp() // seconds) + 1
    if length == 7:
        return (last.year - first.year) * 12 + last.month - first.month + 1
    return last.year - first.year + 1


def bucket_width(first: str | None, last: str | None) -> tuple[str, int]:
    """The finest bucket (name, prefix length) that splits [first, last] (RFC 3339 texts)
    into at most ``MAX_BUCKETS`` buckets; years when none does."""
    if first is None or last is None:
        return BUCKETS[0][:2]
    start, end = _instant(first), _instant(last)
    for name, length, seconds in BUCKETS:
        if _buckets_over(start, end, seconds, length) <= MAX_BUCKETS:
            return name, length
    return BUCKETS[-1][:2]


class ConsoleQueries:
    """Read-only queries of ``vm_view``, ``job_view``, ``server_view`` and the analytics
    tables, for the console's fleet and servers pages."""

    def __init__(self, db: Database):
        self.db = db

    def _rows(self, statement: str, params: list[Any] | tuple[Any, ...] = ()
              ) -> list[dict[str, Any]]:
        with self.db.transaction(commit=False) as tx:
            tx.execute(statement, params)
            return tx.fetchall()

    def states(self, vm_filter: VmFilter) -> dict[str, int]:
        """How many VMs matching ``vm_filter`` are in each state now (every state listed)."""
        where, params = vm_filter.where(self.db.dialect)
        rows = self._rows(f"SELECT state, COUNT(*) AS n FROM vm_view{where} GROUP BY state",
                          params)
        counts = dict.fromkeys(STATE_ORDER, 0)
        counts.update({row["state"]: int(row["n"]) for row in rows})
        return counts

    def states_over_time(self, owner_uuid: str | None = None) -> StatesOverTime:
        """VMs in each state at the end of every time bucket, from the analytics tables alone
        (one read model, so one position of the log): a state's count is the VMs that
        entered it up to the bucket's end, by their creation (``vm_current.created``, in
        ``created_state``: ``provisioning``, or for a VM its agent found, the state it was
        found in) or a state change (``vm_transitions``), minus those that left it. The last
        point therefore equals the counts now (``/stats/states``), and no count is ever
        negative.

        ``owner_uuid`` counts one owner's VMs by the owner the analytics tables keep (a
        quarantined VM stays its owner's; ``vm_view`` gives it to the operator quarantine,
        and counting its creation by that owner but its moves by the first drew a negative
        count)."""
        owner = " WHERE owner_uuid = ?" if owner_uuid is not None else ""
        params = [owner_uuid] if owner_uuid is not None else []
        # one subquery each: SQLite reads a lone MIN or MAX from the index's end
        bounds = self._rows(f"SELECT (SELECT MIN(created) FROM vm_current{owner}) AS first, "
                            f"(SELECT MAX(created) FROM vm_current{owner}) AS last",
                            params * 2)[0]
        last_move = self._rows(f"SELECT MAX(at) AS last FROM vm_transitions{owner}", params)[0]
        last = max(filter(None, (bounds["last"], last_move["last"])), default=None)
        unit, length = bucket_width(bounds["first"], last)
        created = self._rows(
            f"SELECT SUBSTR(created, 1, {length}) AS b, created_state, COUNT(*) AS n "
            f"FROM vm_current{owner} GROUP BY SUBSTR(created, 1, {length}), created_state",
            params)
        moves = self._rows(
            f"SELECT SUBSTR(at, 1, {length}) AS b, from_state, to_state, COUNT(*) AS n "
            f"FROM vm_transitions{owner} "
            f"GROUP BY SUBSTR(at, 1, {length}), from_state, to_state", params)
        change: dict[str, dict[str, int]] = {}
        for row in created:
            bucket = change.setdefault(row["b"], dict.fromkeys(STATE_ORDER, 0))
            bucket[row["created_state"]] += int(row["n"])
        for row in moves:
            bucket = change.setdefault(row["b"], dict.fromkeys(STATE_ORDER, 0))
            bucket[row["from_state"]] -= int(row["n"])
            bucket[row["to_state"]] += int(row["n"])
        running = dict.fromkeys(STATE_ORDER, 0)
        points = []
        for name in sorted(change):
            running = {state: running[state] + change[name][state] for state in STATE_ORDER}
            points.append((name, running))
        return StatesOverTime(unit, points)

    def _vms_matching(self, vm_filter: VmFilter) -> tuple[str, list[Any]]:
        """A condition on ``job_view.vm_uuid``: the VM has the filter's owner and server
        (empty without either, so the unfiltered count reads ``job_view`` alone). The other
        filters do not narrow jobs: a state holds tens of thousands of VMs, and matching
        their jobs would cost a probe per VM on every page."""
        narrowed = VmFilter(owner_uuid=vm_filter.owner_uuid, server_uuid=vm_filter.server_uuid)
        where, params = narrowed.where(self.db.dialect)
        if not where:
            return "", []
        return f"vm_uuid IN (SELECT uuid FROM vm_view{where})", params

    def jobs_by_execution(self, vm_filter: VmFilter) -> dict[str, int]:
        """Jobs of the VMs of the filter's owner and server in each execution state (every
        state listed)."""
        condition, params = self._vms_matching(vm_filter)
        where = f" WHERE {condition}" if condition else ""
        rows = self._rows(
            f"SELECT execution, COUNT(*) AS n FROM job_view{where} GROUP BY execution", params)
        counts = {execution.value: 0 for execution in Execution}
        counts.update({row["execution"]: int(row["n"]) for row in rows})
        return counts

    def deepest_queues(self, vm_filter: VmFilter, limit: int = 10) -> list[dict[str, Any]]:
        """The VMs (of the filter's owner and server) with the most unfinished (queued +
        running) jobs, deepest first: ``[{vm_uuid, depth, oldest_job_at}]``."""
        condition, params = self._vms_matching(vm_filter)
        extra = f" AND {condition}" if condition else ""
        # Materialized first, so the planner reads the few unfinished jobs from the covering
        # index (execution, vm_uuid, created_at) instead of walking every job by VM to
        # group them (SQLite's choice when ANALYZE counts few distinct executions).
        rows = self._rows(
            "WITH unfinished AS MATERIALIZED (SELECT vm_uuid, created_at FROM job_view "
            f"WHERE execution IN (?, ?){extra}) "
            "SELECT vm_uuid, COUNT(*) AS depth, MIN(created_at) AS oldest FROM unfinished "
            "GROUP BY vm_uuid ORDER BY COUNT(*) DESC, MIN(created_at), vm_uuid LIMIT ?",
            [*UNFINISHED, *params, limit])
        return [{"vm_uuid": r["vm_uuid"], "depth": int(r["depth"]),
                 "oldest_job_at": r["oldest"]} for r in rows]

    def in_state(self, vm_filter: VmFilter, state: str, limit: int = 10
                 ) -> list[dict[str, Any]]:
        """Up to ``limit`` matching VMs in ``state``, oldest first: ``[{uuid, alias,
        owner_uuid, server_uuid, create_timestamp}]`` (the count is in ``states``)."""
        where, params = replace(vm_filter, state=state).where(self.db.dialect)
        return self._rows(
            "SELECT uuid, alias, owner_uuid, server_uuid, create_timestamp FROM vm_view"
            f"{where} ORDER BY create_timestamp, uuid LIMIT ?", [*params, limit])

    def servers_page(self, *, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """A page of servers by hostname, each with its capacity, what the claims recorded in
        the log hold of it, and its VMs by state now (``vm_current``, the VM's last server);
        and how many servers there are."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT COUNT(*) AS n FROM server_view")
            total = int(tx.fetchone()["n"])  # type: ignore[index]
            tx.execute("SELECT uuid, hostname, status, ram_mib, cpus FROM server_view "
                       "ORDER BY hostname, uuid LIMIT ? OFFSET ?", (limit, offset))
            servers = tx.fetchall()
            uuids = [s["uuid"] for s in servers]
            marks = ", ".join("?" * len(uuids)) or "NULL"
            tx.execute("SELECT server_uuid, COALESCE(SUM(ram_mib), 0) AS ram, "
                       "COALESCE(SUM(cpus), 0) AS cpus, COUNT(*) AS vms "
                       f"FROM server_view_claims WHERE server_uuid IN ({marks}) "
                       "GROUP BY server_uuid", uuids)
            claims = {r["server_uuid"]: r for r in tx.fetchall()}
            tx.execute("SELECT server_uuid, state, COUNT(*) AS n FROM vm_current "
                       f"WHERE server_uuid IN ({marks}) GROUP BY server_uuid, state", uuids)
            states: dict[str, dict[str, int]] = {}
            for row in tx.fetchall():
                states.setdefault(row["server_uuid"], {})[row["state"]] = int(row["n"])
        page = []
        for server in servers:
            claim = claims.get(server["uuid"]) or {"ram": 0, "cpus": 0, "vms": 0}
            page.append({
                **server,
                "ram_allocated_mib": int(claim["ram"]),
                "ram_free_mib": server["ram_mib"] - int(claim["ram"]),
                "cpus_allocated": int(claim["cpus"]),
                "cpus_free": server["cpus"] - int(claim["cpus"]),
                "vm_count": int(claim["vms"]),
                "vm_states": {s: n for s, n in states.get(server["uuid"], {}).items()},
            })
        return page, total

    def capacity(self) -> dict[str, int]:
        """The whole fleet's capacity and what the claims hold: ``{servers, ram_mib,
        ram_allocated_mib, cpus, cpus_allocated, claims}``."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT COUNT(*) AS n, COALESCE(SUM(ram_mib), 0) AS ram, "
                       "COALESCE(SUM(cpus), 0) AS cpus FROM server_view")
            servers = tx.fetchone() or {}
            tx.execute("SELECT COUNT(*) AS n, COALESCE(SUM(ram_mib), 0) AS ram, "
                       "COALESCE(SUM(cpus), 0) AS cpus FROM server_view_claims")
            claims = tx.fetchone() or {}
        return {"servers": int(servers["n"]), "ram_mib": int(servers["ram"]),
                "ram_allocated_mib": int(claims["ram"]), "cpus": int(servers["cpus"]),
                "cpus_allocated": int(claims["cpus"]), "claims": int(claims["n"])}
