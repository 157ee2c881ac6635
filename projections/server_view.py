"""``server_view``: compute nodes with their allocated and free capacity (``GET /servers``),
and the placement's list of candidates. Built from the ``Server`` events; ``version`` is the
server stream's, every event's (claims and releases too), which the server actions'
``If-Match`` is compared with (``ETag``: api.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from domain.server import Server
from projections.db import Database, Tx
from projections.formats import uuid_text
from projections.runner import ReadModel

_COLUMNS = ("uuid", "hostname", "boot_id", "status", "ram_mib", "cpus", "generation",
            "version")


class ServerView(ReadModel):
    """One row per server, and one per claim (which VM holds how much where)."""

    name = "server_view"
    blind_writes = True
    tables = ("server_view", "server_view_claims")

    def create_statements(self, db: Database) -> list[str]:
        servers, claims = self.table("server_view"), self.table("server_view_claims")
        return [
            f"CREATE TABLE IF NOT EXISTS {servers} (uuid TEXT PRIMARY KEY, "
            "hostname TEXT NOT NULL, boot_id TEXT NOT NULL, status TEXT NOT NULL, "
            "ram_mib INTEGER NOT NULL, cpus INTEGER NOT NULL, generation BIGINT NOT NULL, "
            "version BIGINT NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {claims} (server_uuid TEXT NOT NULL, "
            "vm_uuid TEXT NOT NULL, ram_mib INTEGER NOT NULL, cpus INTEGER NOT NULL, "
            "PRIMARY KEY (server_uuid, vm_uuid))",
        ]

    def apply(self, tx: Tx, events: Sequence[tuple[int, Any]]) -> None:
        # Claims and releases, the many events here, are folded per (server, VM) in memory
        # and written with one DELETE and one INSERT statement a batch, not a statement an
        # event (docs/performance.md, P3); the domain claims a VM on a server only when it
        # holds no claim there (``Server.claim``), so a key's claims and releases alternate.
        # Server rows are few: a statement an event.
        servers, claims = self.table("server_view"), self.table("server_view_claims")
        held: dict[tuple[str, str], tuple[str, str, int, int] | None] = {}
        released: dict[tuple[str, str], None] = {}  # deleted first, in log order
        versions: dict[str, int] = {}  # each server's last version in the batch
        for _position, event in events:
            if not isinstance(event, Server.Event):
                continue
            server_uuid = uuid_text(event.originator_id)
            versions[server_uuid] = event.originator_version
            if isinstance(event, Server.Claimed):
                held[(server_uuid, event.vm_uuid)] = (
                    server_uuid, event.vm_uuid, event.ram_mib, event.cpus)
            elif isinstance(event, Server.ClaimReleased):
                held[(server_uuid, event.vm_uuid)] = None
                released[(server_uuid, event.vm_uuid)] = None
            elif isinstance(event, Server.Registered):
                tx.execute(
                    f"INSERT INTO {servers} ({', '.join(_COLUMNS)}) "
                    "VALUES (?, ?, ?, 'running', ?, ?, 0, ?)",
                    (server_uuid, event.hostname, event.boot_id, event.ram_mib, event.cpus,
                     event.originator_version),
                )
            elif isinstance(event, Server.Rebooted):
                tx.execute(f"UPDATE {servers} SET boot_id = ? WHERE uuid = ?",
                           (event.boot_id, server_uuid))
            elif isinstance(event, Server.StatusChanged):
                tx.execute(f"UPDATE {servers} SET status = ? WHERE uuid = ?",
                           (event.status, server_uuid))
            elif isinstance(event, Server.ReportApplied):
                tx.execute(f"UPDATE {servers} SET generation = ? WHERE uuid = ?",
                           (event.generation, server_uuid))
        tx.executemany(f"DELETE FROM {claims} WHERE server_uuid = ? AND vm_uuid = ?",
                       list(released))
        tx.executemany(f"INSERT INTO {claims} (server_uuid, vm_uuid, ram_mib, cpus) "
                       "VALUES (?, ?, ?, ?)", [row for row in held.values() if row is not None])
        # one statement a server the batch changed, after its row was inserted
        tx.executemany(f"UPDATE {servers} SET version = ? WHERE uuid = ?",
                       [(version, server_uuid) for server_uuid, version in versions.items()])


_SELECT = (
    "SELECT s.uuid, s.hostname, s.boot_id, s.status, s.ram_mib, s.cpus, s.generation, "
    "s.version, "
    "COALESCE(SUM(c.ram_mib), 0) AS ram_allocated_mib, "
    "COALESCE(SUM(c.cpus), 0) AS cpus_allocated, COUNT(c.vm_uuid) AS vm_count "
    "FROM server_view s LEFT JOIN server_view_claims c ON c.server_uuid = s.uuid"
)
_GROUP = (" GROUP BY s.uuid, s.hostname, s.boot_id, s.status, s.ram_mib, s.cpus, "
          "s.generation, s.version")


def render_server(row: dict[str, Any]) -> dict[str, Any]:
    """The server object: capacity in MiB and CPUs, allocated and free; ``version``, its
    stream's (the ``ETag``)."""
    return {
        "uuid": row["uuid"],
        "hostname": row["hostname"],
        "boot_id": row["boot_id"],
        "status": row["status"],
        "ram_mib": row["ram_mib"],
        "cpus": row["cpus"],
        "ram_allocated_mib": int(row["ram_allocated_mib"]),
        "ram_free_mib": row["ram_mib"] - int(row["ram_allocated_mib"]),
        "cpus_allocated": int(row["cpus_allocated"]),
        "cpus_free": row["cpus"] - int(row["cpus_allocated"]),
        "vm_count": int(row["vm_count"]),
        "generation": row["generation"],
        "version": row["version"],
    }


def server_object(server: Server) -> dict[str, Any]:
    """The server object of the aggregate ``server``: what ``ServerQueries.get`` gives once
    ``server_view`` reflects the aggregate's version (``render_server`` of the row it would
    hold). A server command answers with it, so its answer never waits for the projector
    (api.md, "Commands and the projector")."""
    return render_server({
        "uuid": uuid_text(server.id), "hostname": server.hostname, "boot_id": server.boot_id,
        "status": server.status, "ram_mib": server.ram_mib, "cpus": server.cpus,
        "ram_allocated_mib": server.ram_allocated_mib, "cpus_allocated": server.cpus_allocated,
        "vm_count": len(server.claims), "generation": server.generation,
        "version": server.version,
    })


class ServerQueries:
    """Read-only queries of ``server_view``."""

    def __init__(self, db: Database):
        self.db = db

    def list(self) -> list[dict[str, Any]]:
        """Every server, by hostname."""
        with self.db.transaction(commit=False) as tx:
            tx.execute(f"{_SELECT}{_GROUP} ORDER BY s.hostname, s.uuid")
            return [render_server(row) for row in tx.fetchall()]

    def get(self, server_uuid: str) -> dict[str, Any] | None:
        """One server, or None."""
        row = self.db.one(f"{_SELECT} WHERE s.uuid = ?{_GROUP}", (server_uuid,))
        return None if row is None else render_server(row)

    def status(self, server_uuid: str) -> str | None:
        """The server's status (``running``, ``unknown``, ``removed``), or None for a server
        the read model does not have: one row by key, for callers that ask often (the job
        worker, before each operation on a server)."""
        row = self.db.one("SELECT status FROM server_view WHERE uuid = ?", (server_uuid,))
        return None if row is None else row["status"]

    def candidates(self, ram_mib: int, cpus: int) -> list[str]:
        """Running servers that seem to have room, the most free RAM first (the placement's
        shortlist; the claim on the server's stream decides)."""
        with self.db.transaction(commit=False) as tx:
            tx.execute(
                f"{_SELECT} WHERE s.status = 'running'{_GROUP} "
                "HAVING s.ram_mib - COALESCE(SUM(c.ram_mib), 0) >= ? "
                "AND s.cpus - COALESCE(SUM(c.cpus), 0) >= ? "
                "ORDER BY s.ram_mib - COALESCE(SUM(c.ram_mib), 0) DESC, s.hostname",
                (ram_mib, cpus),
            )
            return [row["uuid"] for row in tx.fetchall()]
