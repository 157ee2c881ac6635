"""Queries over ``vm_view`` for GetVm, ListVms and CountVms.

Filters and sort fields come from fixed lists; values are always bound parameters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from domain.json_input import cut
from domain.vm import Vm
from projections.db import Database, Dialect
from projections.vm_markers import InvalidMarkerError, encode_marker
from projections.vm_view import render_vm
from projections.volume_mounts import STALE_VMS, with_mounts

# sort field -> SQL expression (NULLs folded so keyset paging has a total order). VMAPI's
# sort keys (sdc-vmapi lib/validation/sort.js), and ``ram`` (ours, VMAPI's
# ``max_physical_memory``). vmledger records no billing id and makes no docker VMs, so those
# two sort every VM alike, and the order is the uuid's (expressions, not bare literals: SQL
# reads ``ORDER BY 0`` as a column number).
SORT_FIELDS: dict[str, str] = {
    "uuid": "uuid",
    "owner_uuid": "owner_uuid",
    "image_uuid": "COALESCE(image_uuid, '')",
    "billing_id": "substr(uuid, 1, 0)",
    "server_uuid": "COALESCE(server_uuid, '')",
    "tags": "tags_text",
    "brand": "brand",
    "state": "state",
    "alias": "COALESCE(alias, '')",
    "max_physical_memory": "ram",
    "ram": "ram",
    "create_timestamp": "create_timestamp",
    "docker": "ram * 0",
}


@dataclass
class VmFilter:
    """ListVms filters (api.md, ``GET /vms``; VMAPI's ListVms parameters); None means "any".

    ``alias`` matches as a prefix, as VMAPI's does (``alias=web`` lists ``web-1``). A
    ``tags`` or ``internal_metadata`` value with ``*`` in it is a pattern (``WILDCARD``).
    ``create_timestamp`` is an RFC 3339 instant with milliseconds (exact match).
    """

    owner_uuid: str | None = None
    server_uuid: str | None = None
    state: str | None = None  # a state, or "active" (not destroyed, not failed)
    brand: str | None = None
    alias: str | None = None
    uuid: str | None = None
    uuids: list[str] | None = None
    image_uuid: str | None = None
    ram: int | None = None
    create_timestamp: str | None = None
    # A filter no VM can match: on a field vmledger does not record (VMAPI's billing_id,
    # package_name, package_version), or a ram beyond any VM's.
    unrecorded: bool = False
    docker: bool | None = None  # vmledger makes no docker VMs: true matches none
    tags: dict[str, str] = field(default_factory=dict)
    internal_metadata: dict[str, str] = field(default_factory=dict)
    # True: only running VMs mounting a volume whose address changed; False: only the
    # others; None: no filter
    stale_mounts: bool | None = None

    def where(self, dialect: Dialect) -> tuple[str, list[Any]]:
        """The WHERE clause (with leading ``WHERE`` or empty) and its parameters, in
        ``dialect``'s SQL (a wildcard's match is written per backend: ``_matching``)."""
        clauses: list[str] = []
        params: list[Any] = []
        for column in ("owner_uuid", "server_uuid", "brand", "uuid", "image_uuid", "ram",
                       "create_timestamp"):
            value = getattr(self, column)
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if self.alias is not None:
            clauses.append("substr(alias, 1, length(CAST(? AS TEXT))) = ?")
            params.extend([self.alias, self.alias])
        if self.unrecorded or self.docker:
            clauses.append("1 = 0")
        if self.state == "active":
            clauses.append("state NOT IN ('destroyed', 'failed')")
        elif self.state is not None:
            clauses.append("state = ?")
            params.append(self.state)
        for table, pairs in (("vm_view_tags", self.tags),
                             ("vm_view_internal_metadata", self.internal_metadata)):
            if pairs:
                clause, pair_params = _having_every_pair(table, pairs, dialect)
                clauses.append(clause)
                params.extend(pair_params)
        if self.uuids is not None:
            if not self.uuids:
                clauses.append("1 = 0")
            else:
                clauses.append(f"uuid IN ({', '.join('?' * len(self.uuids))})")
                params.extend(self.uuids)
        if self.stale_mounts is not None:
            clauses.append(STALE_VMS if self.stale_mounts else f"NOT ({STALE_VMS})")
        return (" WHERE " + " AND ".join(clauses) if clauses else "", params)


def _having_every_pair(table: str, pairs: dict[str, str], dialect: Dialect
                       ) -> tuple[str, list[Any]]:
    """The clause (and its parameters) of the VMs whose rows in ``table`` (one a key: its
    primary key is ``(vm_uuid, key)``) hold every ``key = value`` pair of ``pairs``, a
    value with ``WILDCARD`` in it matched as a pattern (``_matching``): one grouped
    subquery, the VMs with as many matching rows as there are pairs (a row matches one pair
    at most: the keys differ). A clause a pair, ANDed, grew the expression with each (SQLite
    refuses one over 1,000 deep; PostgreSQL's planner slowed with each clause, until the
    statement timed out)."""
    exact = sorted((key, value) for key, value in pairs.items() if WILDCARD not in value)
    patterns = sorted((key, value) for key, value in pairs.items() if WILDCARD in value)
    conditions: list[str] = []
    params: list[Any] = []
    if exact:
        conditions.append(f"(key, value) IN (VALUES {', '.join('(?, ?)' for _ in exact)})")
        params.extend(item for pair in exact for item in pair)
    for key, value in patterns:
        condition, pattern = _matching(value, dialect)
        conditions.append(f"(key = ? AND {condition})")
        params.extend([key, pattern])
    clause = (f"uuid IN (SELECT vm_uuid FROM {table} WHERE {' OR '.join(conditions)} "
              "GROUP BY vm_uuid HAVING COUNT(*) = ?)")
    return clause, [*params, len(pairs)]


#: What a ``tag.K`` or ``internal_metadata.K`` filter's value matches any run of characters
#: with (none too): VMAPI writes the value into its LDAP filter unescaped, where ``*`` is
#: the substring wildcard (sdc-vmapi lib/apis/moray.js, ``_addTagsFilter``).
WILDCARD = "*"


def _matching(value: str, dialect: Dialect) -> tuple[str, str]:
    """The condition on ``value`` (the column) matching the filter value ``value`` with its
    ``WILDCARD`` s, and the pattern it binds: every other character is itself, and case
    counts, on both backends. SQLite's ``LIKE`` ignores ASCII case, so it is ``GLOB`` there
    (its ``?`` and ``[`` made literal as one-character sets); PostgreSQL's ``LIKE`` with
    ``%``, ``_`` and its escape character ``!`` escaped."""
    parts = value.split(WILDCARD)
    if dialect is Dialect.SQLITE:
        literal = ["".join(f"[{c}]" if c in "?[" else c for c in part) for part in parts]
        return "value GLOB ?", "*".join(literal)
    literal = [part.replace("!", "!!").replace("%", "!%").replace("_", "!_")
               for part in parts]
    return "value LIKE ? ESCAPE '!'", "%".join(literal)


MISSING = object()  # a marker that names only the uuid: the row's own sort value is used


@dataclass
class Page:
    """Which slice of the matches: by ``offset`` or after a marker. ``after`` is the last row
    of the previous page as ``(sort value, uuid)``; the sort value may be ``MISSING`` (a VMAPI
    marker ``{"uuid": …}`` under another sort), then it is the named VM's own value."""

    sort_field: str = "create_timestamp"
    descending: bool = False
    limit: int = 1000
    offset: int = 0
    after: tuple[Any, str] | None = None
    # The owner whose VMs alone the caller may see (an owner token's); None: every VM. A
    # marker naming only the uuid of another VM names no VM: its sort value would tell the
    # caller that the VM exists and where it falls among the caller's own
    seen_by: str | None = None

    @property
    def sort(self) -> str:
        """The order's name, as markers carry it (``ram.desc``)."""
        return f"{self.sort_field}.{'desc' if self.descending else 'asc'}"


class VmQueries:
    """Read-only queries of ``vm_view``."""

    def __init__(self, db: Database):
        self.db = db

    def _sort_value(self, expression: str, vm_uuid: str, seen_by: str | None) -> Any:
        """The sort value of the VM a marker names by its uuid alone. Raises
        ``InvalidMarkerError`` when there is no such VM, or none the caller may see
        (``Page.seen_by``): the same answer for both."""
        owned, params = ("", [vm_uuid]) if seen_by is None else (
            " AND owner_uuid = ?", [vm_uuid, seen_by])
        with self.db.transaction(commit=False) as tx:
            tx.execute(f"SELECT {expression} AS v FROM vm_view WHERE uuid = ?{owned}", params)
            row = tx.fetchone()
        if row is None:
            raise InvalidMarkerError(f"the marker names no VM ({cut(vm_uuid)})")
        return row["v"]

    def get(self, vm_uuid: str) -> dict[str, Any] | None:
        """The VM object (its volumes' addresses from ``volume_mounts``), or None."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT body FROM vm_view WHERE uuid = ?", (vm_uuid,))
            row = tx.fetchone()
            return None if row is None else with_mounts(tx, [json.loads(row["body"])])[0]

    def with_alias(self, owner_uuid: str, alias: str) -> list[str]:
        """The uuids of the VMs of ``owner_uuid`` with ``alias`` exactly, not destroyed, as
        ``vm_view`` has them now: the alias holds' one look at VMs that took their alias
        before holds were recorded (service/commands/aliases.py), which checks each against
        its stream."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT uuid FROM vm_view WHERE owner_uuid = ? AND alias = ? "
                       "AND state <> 'destroyed'", (owner_uuid, alias))
            return [row["uuid"] for row in tx.fetchall()]

    def render(self, vm: Vm) -> dict[str, Any]:
        """The VM object of the aggregate ``vm`` as ``get`` gives it once ``vm_view`` reflects
        ``vm``'s version: ``render_vm`` (what ``vm_view`` stores as the row's body) with its
        volumes' addresses from ``volume_mounts`` as it is now, without waiting for either
        read model. A command answers its VM with it (the quarantine, an agent's report), so
        a command's answer never waits on the projector (api.md, "Commands and the
        projector")."""
        with self.db.transaction(commit=False) as tx:
            return with_mounts(tx, [render_vm(vm)])[0]

    def count(self, vm_filter: VmFilter) -> int:
        """How many VMs match, whatever the page."""
        where, params = vm_filter.where(self.db.dialect)
        with self.db.transaction(commit=False) as tx:
            tx.execute(f"SELECT COUNT(*) AS n FROM vm_view{where}", params)
            row = tx.fetchone()
        return int(row["n"]) if row else 0

    def list(self, vm_filter: VmFilter, page: Page) -> tuple[list[dict[str, Any]], str | None]:
        """One page of matching VM objects in a stable total order (sort field, then uuid),
        and the marker of the next page (None on the last page)."""
        where, params = vm_filter.where(self.db.dialect)
        expression = SORT_FIELDS[page.sort_field]
        direction = "DESC" if page.descending else "ASC"
        sort = page.sort
        if page.after is not None:
            value, uuid = page.after
            if value is MISSING:
                value = self._sort_value(expression, uuid, page.seen_by)
            comparison = "<" if page.descending else ">"
            keyset = f"({expression}, uuid) {comparison} (?, ?)"
            where = f"{where} AND {keyset}" if where else f" WHERE {keyset}"
            params = [*params, value, uuid]
        statement = (
            f"SELECT body, {expression} AS sort_value, uuid FROM vm_view{where} "
            f"ORDER BY {expression} {direction}, uuid {direction} LIMIT ? OFFSET ?"
        )
        with self.db.transaction(commit=False) as tx:
            tx.execute(statement, [*params, page.limit + 1, page.offset])
            rows = tx.fetchall()
            more = len(rows) > page.limit
            rows = rows[: page.limit]
            vms = with_mounts(tx, [json.loads(r["body"]) for r in rows])
        next_marker = (encode_marker(sort, rows[-1]["sort_value"], rows[-1]["uuid"]) if more
                       else None)
        return vms, next_marker
