"""Queries over ``vm_view`` for GetVm, ListVms and CountVms.

Filters and sort fields come from fixed lists; values are always bound parameters.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from projections.db import Database
from projections.volume_mounts import STALE_VMS, with_mounts

# sort field -> SQL expression (NULLs folded so keyset paging has a total order)
SORT_FIELDS: dict[str, str] = {
    "uuid": "uuid",
    "owner_uuid": "owner_uuid",
    "image_uuid": "COALESCE(image_uuid, '')",
    "server_uuid": "COALESCE(server_uuid, '')",
    "brand": "brand",
    "state": "state",
    "alias": "COALESCE(alias, '')",
    "ram": "ram",
    "create_timestamp": "create_timestamp",
}


class InvalidMarkerError(ValueError):
    """A ``marker`` that no previous page handed out."""


@dataclass
class VmFilter:
    """ListVms filters (api.md, ``GET /vms``); None means "any"."""

    owner_uuid: str | None = None
    server_uuid: str | None = None
    state: str | None = None  # a state, or "active" (not destroyed, not failed)
    brand: str | None = None
    alias: str | None = None
    uuids: list[str] | None = None
    tags: dict[str, str] = field(default_factory=dict)
    stale_mounts: bool = False  # only running VMs mounting a volume whose address changed

    def where(self) -> tuple[str, list[Any]]:
        """The WHERE clause (with leading ``WHERE`` or empty) and its parameters."""
        clauses: list[str] = []
        params: list[Any] = []
        for column in ("owner_uuid", "server_uuid", "brand", "alias"):
            value = getattr(self, column)
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if self.state == "active":
            clauses.append("state NOT IN ('destroyed', 'failed')")
        elif self.state is not None:
            clauses.append("state = ?")
            params.append(self.state)
        for key, value in sorted(self.tags.items()):
            clauses.append(
                "uuid IN (SELECT vm_uuid FROM vm_view_tags WHERE key = ? AND value = ?)"
            )
            params.extend([key, value])
        if self.uuids is not None:
            if not self.uuids:
                clauses.append("1 = 0")
            else:
                clauses.append(f"uuid IN ({', '.join('?' * len(self.uuids))})")
                params.extend(self.uuids)
        if self.stale_mounts:
            clauses.append(STALE_VMS)
        return (" WHERE " + " AND ".join(clauses) if clauses else "", params)


@dataclass
class Page:
    """Which slice of the matches: by ``offset`` or after a ``marker``."""

    sort_field: str = "create_timestamp"
    descending: bool = False
    limit: int = 1000
    offset: int = 0
    marker: str | None = None


def encode_marker(sort: str, sort_value: Any, uuid: str) -> str:
    """The opaque cursor naming the last row of a page, and the order (``sort``) it is in."""
    raw = json.dumps([sort, sort_value, uuid]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_marker(marker: str, sort: str) -> tuple[Any, str]:
    """The (sort value, uuid) a marker names. Raises ``InvalidMarkerError`` unless the marker
    was made for the same ``sort`` with a value of its column's type (a mismatched value would
    make the database refuse the comparison)."""
    try:
        padded = marker + "=" * (-len(marker) % 4)
        made_for, value, uuid = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, TypeError) as error:
        raise InvalidMarkerError(marker) from error
    wanted = int if sort.startswith("ram.") else str
    if made_for != sort or not isinstance(uuid, str) or type(value) is not wanted:
        raise InvalidMarkerError(marker)
    return value, uuid


class VmQueries:
    """Read-only queries of ``vm_view``."""

    def __init__(self, db: Database):
        self.db = db

    def get(self, vm_uuid: str) -> dict[str, Any] | None:
        """The VM object (its volumes' addresses from ``volume_mounts``), or None."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT body FROM vm_view WHERE uuid = ?", (vm_uuid,))
            row = tx.fetchone()
            return None if row is None else with_mounts(tx, [json.loads(row["body"])])[0]

    def count(self, vm_filter: VmFilter) -> int:
        """How many VMs match, whatever the page."""
        where, params = vm_filter.where()
        with self.db.transaction(commit=False) as tx:
            tx.execute(f"SELECT COUNT(*) AS n FROM vm_view{where}", params)
            row = tx.fetchone()
        return int(row["n"]) if row else 0

    def list(self, vm_filter: VmFilter, page: Page) -> tuple[list[dict[str, Any]], str | None]:
        """One page of matching VM objects in a stable total order (sort field, then uuid),
        and the marker of the next page (None on the last page)."""
        where, params = vm_filter.where()
        expression = SORT_FIELDS[page.sort_field]
        direction = "DESC" if page.descending else "ASC"
        sort = f"{page.sort_field}.{direction.lower()}"
        if page.marker is not None:
            value, uuid = decode_marker(page.marker, sort)
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
