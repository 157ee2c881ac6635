"""The simulated compute fleet: the embedded default driver (design.md, "Compute nodes").

Servers and the VMs on them live in two tables of the service's own database, so the
simulated world survives restarts. Each operation waits ``latency_s`` first.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from uuid import UUID

from projections.db import Database
from service.compute.driver import ComputeError, PowerState, ServerInfo, TargetState

_NAMESPACE = uuidlib.uuid5(UUID(int=0), "vmledger:simulated-fleet")

DDL = (
    "CREATE TABLE IF NOT EXISTS sim_servers (uuid TEXT PRIMARY KEY, hostname TEXT NOT NULL, "
    "boot_id TEXT NOT NULL, ram_mib INTEGER NOT NULL, cpus INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sim_vms (vm_uuid TEXT PRIMARY KEY, server_uuid TEXT NOT NULL, "
    "state TEXT NOT NULL, ram_mib INTEGER NOT NULL, boots INTEGER NOT NULL)",
)


def simulated_server_uuid(index: int) -> str:
    """The stable uuid of simulated server number ``index``."""
    return str(uuidlib.uuid5(_NAMESPACE, f"server-{index}"))


class SimulatedFleet:
    """A ``ComputeDriver`` over simulated servers."""

    def __init__(self, db: Database, *, latency_s: float = 0.0):
        self.db = db
        self.latency_s = latency_s

    def create_tables(self) -> None:
        """Create the simulator's tables (idempotent)."""
        with self.db.transaction() as tx:
            for statement in DDL:
                tx.execute(statement)

    def ensure_servers(self, count: int, *, ram_mib: int, cpus: int) -> None:
        """Make sure servers 0..count-1 exist (existing ones keep their state)."""
        with self.db.transaction() as tx:
            for index in range(count):
                tx.execute(
                    "INSERT INTO sim_servers (uuid, hostname, boot_id, ram_mib, cpus) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (uuid) DO NOTHING",
                    (simulated_server_uuid(index), f"sim{index:04d}", str(uuidlib.uuid4()),
                     ram_mib, cpus),
                )

    def _wait(self) -> None:
        if self.latency_s:
            time.sleep(self.latency_s)

    def servers(self) -> list[ServerInfo]:
        with self.db.transaction(commit=False) as tx:
            tx.execute(
                "SELECT s.uuid, s.hostname, s.boot_id, s.ram_mib, s.cpus, "
                "COALESCE(SUM(v.ram_mib), 0) AS allocated FROM sim_servers s "
                "LEFT JOIN sim_vms v ON v.server_uuid = s.uuid "
                "GROUP BY s.uuid, s.hostname, s.boot_id, s.ram_mib, s.cpus ORDER BY s.hostname"
            )
            rows = tx.fetchall()
        return [
            ServerInfo(uuid=r["uuid"], hostname=r["hostname"], boot_id=r["boot_id"],
                       ram_mib=r["ram_mib"], cpus=r["cpus"], ram_allocated_mib=int(r["allocated"]))
            for r in rows
        ]

    def server_info(self, server_uuid: str) -> ServerInfo:
        for server in self.servers():
            if server.uuid == server_uuid:
                return server
        raise ComputeError(f"unknown server {server_uuid}")

    def inventory(self, server_uuid: str) -> dict[str, PowerState]:
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT vm_uuid, state FROM sim_vms WHERE server_uuid = ?", (server_uuid,))
            return {r["vm_uuid"]: r["state"] for r in tx.fetchall()}

    def ensure_registered(
        self, server_uuid: str, vm_uuid: str, *, ram_mib: int, metadata: dict[str, object]
    ) -> None:
        self._wait()
        # VMAPI's own tests make a provision fail this way.
        if str(metadata.get("force_provision_failure", "")).lower() == "true":
            raise ComputeError("provision failed: force_provision_failure was set")
        self.server_info(server_uuid)
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO sim_vms (vm_uuid, server_uuid, state, ram_mib, boots) "
                "VALUES (?, ?, 'stopped', ?, 0) ON CONFLICT (vm_uuid) DO NOTHING",
                (vm_uuid, server_uuid, ram_mib),
            )

    def ensure_state(self, server_uuid: str, vm_uuid: str, state: TargetState) -> None:
        self._wait()
        with self.db.transaction() as tx:
            tx.execute(
                "SELECT state FROM sim_vms WHERE vm_uuid = ? AND server_uuid = ?",
                (vm_uuid, server_uuid),
            )
            row = tx.fetchone()
            if row is None:
                raise ComputeError(f"VM {vm_uuid} is not on server {server_uuid}")
            if state == "stopped":
                tx.execute("UPDATE sim_vms SET state = 'stopped' WHERE vm_uuid = ?", (vm_uuid,))
            elif state == "rebooted" or row["state"] != "running":
                tx.execute(
                    "UPDATE sim_vms SET state = 'running', boots = boots + 1 WHERE vm_uuid = ?",
                    (vm_uuid,),
                )

    def unregister(self, server_uuid: str, vm_uuid: str) -> None:
        self._wait()
        with self.db.transaction() as tx:
            tx.execute(
                "DELETE FROM sim_vms WHERE vm_uuid = ? AND server_uuid = ?", (vm_uuid, server_uuid)
            )

    def boots(self, vm_uuid: str) -> int:
        """How many times the simulated VM was booted (for tests of replay safety)."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT boots FROM sim_vms WHERE vm_uuid = ?", (vm_uuid,))
            row = tx.fetchone()
        return 0 if row is None else int(row["boots"])


def place(servers: list[ServerInfo], ram_mib: int) -> str | None:
    """The server with the most free RAM that fits ``ram_mib`` (ties: by hostname), or None."""
    fitting = [s for s in servers if s.status == "running" and s.ram_free_mib >= ram_mib]
    if not fitting:
        return None
    return max(fitting, key=lambda s: (s.ram_free_mib, s.hostname)).uuid
