"""A read model whose tracking position is behind its own rows: its ``projection_tracking``
row set back behind the service's back, or its tables restored newer than it. The runner then
applies events its rows already hold, and each read model fails in its own words (a
duplicate key, a transition its fold refuses) that say nothing of the cause. When a batch
fails, ``rows_past`` looks for a row that holds an event after the batch's start, so the
runner can say what happened and how to mend it (``vmledger rebuild``); the log is intact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from projections.db import Database
from projections.read_model import ReadModel
from projections.rebuild import SUFFIX as REBUILD_SUFFIX

# ids a statement: far below either backend's limit on parameters
_CHUNK = 500


class TrackingBehindError(Exception):
    """Read model ``read_model``'s tracking position is behind its rows (``detail`` names
    one such row or event). The error is the read model's, not the log's: a rebuild of the
    read model mends it (auditor tester: the fold's own words, "stream … has a gap", blamed
    an intact log)."""

    def __init__(self, read_model: str, detail: str):
        self.read_model = read_model.removesuffix(REBUILD_SUFFIX)
        super().__init__(
            f"read model {self.read_model}'s tracking is behind its rows: {detail}; the log "
            f"is intact: `vmledger rebuild {self.read_model}` rebuilds the read model")


def rows_past(db: Database, group: Sequence[ReadModel], start: int,
              events: Sequence[tuple[int, Any]]) -> TrackingBehindError | None:
    """The error for the first read model of ``group`` (all tracked at ``start``) one of whose
    rows holds an event after ``start``, or None. A row is past ``start`` when its
    ``position`` column is, or when its table is keyed by a stream's ``uuid`` and has a
    ``version`` at or past the version of that stream's first event in ``events`` (the
    batch's ``(position, event)`` pairs). Read in a transaction of its own: the batch's
    failed. A read model whose tracking a rival runner has moved on since is not asked."""
    first_versions: dict[str, tuple[int, int]] = {}
    for position, event in events:
        first_versions.setdefault(str(event.originator_id),
                                  (event.originator_version, position))
    with db.transaction(commit=False) as tx:
        for read_model in group:
            tx.execute("SELECT position FROM projection_tracking WHERE name = ?",
                       (read_model.name,))
            tracked = tx.fetchone()
            if tracked is None or tracked["position"] != start:
                continue  # a rival runner moved it: its rows are past start by right
            for table, columns in read_model.declared_columns(db).items():
                if "position" in columns:
                    detail = _position_past(tx, table, columns, start)
                elif "uuid" in columns and "version" in columns:
                    detail = _version_past(tx, table, first_versions)
                else:
                    continue
                if detail is not None:
                    return TrackingBehindError(read_model.name, detail)
    return None


def _position_past(tx: Any, table: str, columns: list[str], start: int) -> str | None:
    key = [c for c in ("uuid", "vm_uuid", "version") if c in columns]
    tx.execute(f"SELECT {', '.join(key + ['position'])} FROM {table} "  # our own table names
               "WHERE position > ? LIMIT 1", (start,))
    row = tx.fetchone()
    if row is None:
        return None
    named = " ".join(str(row[c]) for c in key)
    return (f"row {table} {named} holds the event at log position {row['position']}, past "
            f"its tracking position {start}")


def _version_past(tx: Any, table: str, first_versions: dict[str, tuple[int, int]]
                  ) -> str | None:
    ids = list(first_versions)
    for begin in range(0, len(ids), _CHUNK):
        chunk = ids[begin:begin + _CHUNK]
        tx.execute(f"SELECT uuid, version FROM {table} "  # our own table names
                   f"WHERE uuid IN ({', '.join('?' * len(chunk))})", chunk)
        for row in tx.fetchall():
            version, position = first_versions[row["uuid"]]
            if row["version"] >= version:
                return (f"the event of version {version} of stream {row['uuid']} (log "
                        f"position {position}) comes again, and row {table} {row['uuid']} is "
                        f"at version {row['version']}")
    return None
