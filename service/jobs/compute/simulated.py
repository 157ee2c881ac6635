"""The simulated compute fleet: the embedded default driver (design.md, "Compute nodes").

Servers and the VMs on them live in tables of the service's own database, so the simulated
world survives restarts and every process sees the same one. Faults can be injected
(``service.jobs.compute.faults``; HTTP under ``/sim/``, see docs/simulation.md).

A VM row is one copy of a VM on one server. ``known`` is whether that server's agent knows
the copy: after an agent restart the copies keep running but the agent no longer reports them,
which is how a second copy could come to run if the control plane restarted the VM elsewhere.
``boots`` counts the copy's boots: it is the number of its latest incarnation, and
``booted_by`` the effect (a job's uuid) that began it (service/jobs/compute/driver.py).
``config`` is the copy's configuration as ``reconfigure`` left it
(service/jobs/compute/sim_config.py). ``seq`` is the server's sequence number: every
operation on a VM there and every happening of a guest there bumps it first, in the same
transaction (so they are ordered by the server row's lock, and a report, which reads it the
same way, sees exactly what happened up to its number); each ``Incarnation`` answered, and
each report, carries it (service/jobs/compute/driver.py).
Every operation on a VM admits its job's fence in its own transaction first, as the server
it is asked of keeps it (service/jobs/compute/fences.py), so a lost worker's late step
changes nothing on a server that has seen a newer fence.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any
from uuid import UUID

from projections.db import Database
from service.jobs.compute.driver import (
    ComputeError, Fence, Incarnation, PowerState, ServerInfo, ServerRemovedError, TargetState,
    UnknownServerError,
)
from service.jobs.compute.faults import FAULTS_DDL, Faults, Operation
from service.jobs.compute.fences import (
    FENCES_DDL, PER_VM_LACKS, admit, carry_per_vm_fences,
)
from service.jobs.compute.sim_config import copy_config, reconfigure_copy
from service.jobs.compute.sim_world import SimulatedWorld, bump as _bump

_NAMESPACE = uuidlib.uuid5(UUID(int=0), "vmledger:simulated-fleet")

DDL = (
    ("CREATE TABLE IF NOT EXISTS sim_servers (uuid TEXT PRIMARY KEY, hostname TEXT NOT NULL, "
    "boot_id TEXT NOT NULL, ram_mib INTEGER NOT NULL, cpus INTEGER NOT NULL, "
    "status TEXT NOT NULL DEFAULT 'running', generation BIGINT NOT NULL DEFAULT 0, "
    "seq BIGINT NOT NULL DEFAULT 0)"),
    ("CREATE TABLE IF NOT EXISTS sim_vms (vm_uuid TEXT NOT NULL, server_uuid TEXT NOT NULL, "
    "state TEXT NOT NULL, ram_mib INTEGER NOT NULL, boots INTEGER NOT NULL, "
    "known INTEGER NOT NULL DEFAULT 1, booted_by TEXT, config TEXT, "
    "PRIMARY KEY (vm_uuid, server_uuid))"),
    *FAULTS_DDL,
    *FENCES_DDL,
)

# Columns added since the tables were first made (git log -p of this file): (table, column,
# type), added where missing; the schema check (service/schema_check.py) lets an older table
# lack them, and no other.
ADDED_COLUMNS = (
    ("sim_servers", "status", "TEXT NOT NULL DEFAULT 'running'"),
    ("sim_servers", "generation", "BIGINT NOT NULL DEFAULT 0"),
    ("sim_servers", "seq", "BIGINT NOT NULL DEFAULT 0"),
    ("sim_vms", "known", "INTEGER NOT NULL DEFAULT 1"),
    ("sim_vms", "booted_by", "TEXT"),
    ("sim_vms", "config", "TEXT"),
)


def simulated_server_uuid(index: int) -> str:
    """The stable uuid of simulated server number ``index``."""
    return str(uuidlib.uuid5(_NAMESPACE, f"server-{index}"))


class SimulatedFleet(SimulatedWorld):
    """A ``ComputeDriver`` over simulated servers, with fault injection (and what happens to
    its world: ``SimulatedWorld``)."""

    def __init__(self, db: Database, *, latency_s: float = 0.0):
        self.db = db
        self.faults = Faults(db, default_latency_s=latency_s)

    def create_tables(self) -> None:
        """Create the simulator's tables (idempotent), adding the columns an older table
        lacks and keying an older per-VM ``sim_fences`` per server (``carry_per_vm_fences``)."""
        with self.db.transaction() as tx:
            # a round trip for the DDL, one for every table's columns (and one per ALTER)
            tx.execute_all(DDL)
            present = self.db.columns_of(tx, {table for table, _, _ in ADDED_COLUMNS}
                                         | {PER_VM_LACKS[0]})
            for table, column, kind in ADDED_COLUMNS:
                if column not in present[table]:
                    tx.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            carry_per_vm_fences(self.db, tx, present[PER_VM_LACKS[0]])

    def ensure_servers(self, count: int, *, ram_mib: int, cpus: int) -> None:
        """Make sure servers 0..count-1 exist (existing ones keep their state)."""
        with self.db.transaction() as tx:
            tx.executemany(  # one round trip for them all (psycopg pipelines them)
                "INSERT INTO sim_servers (uuid, hostname, boot_id, ram_mib, cpus) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (uuid) DO NOTHING",
                [(simulated_server_uuid(index), f"sim{index:04d}", str(uuidlib.uuid4()),
                  ram_mib, cpus) for index in range(count)])

    # -- the ComputeDriver protocol ---------------------------------------------------------

    def servers(self) -> list[ServerInfo]:
        with self.db.transaction(commit=False) as tx:
            tx.execute(
                "SELECT s.uuid, s.hostname, s.boot_id, s.ram_mib, s.cpus, s.status, "
                "COALESCE(SUM(v.ram_mib), 0) AS allocated FROM sim_servers s "
                "LEFT JOIN sim_vms v ON v.server_uuid = s.uuid "
                "GROUP BY s.uuid, s.hostname, s.boot_id, s.ram_mib, s.cpus, s.status "
                "ORDER BY s.hostname"
            )
            rows = tx.fetchall()
        return [
            ServerInfo(uuid=r["uuid"], hostname=r["hostname"], boot_id=r["boot_id"],
                       ram_mib=r["ram_mib"], cpus=r["cpus"], status=r["status"],
                       ram_allocated_mib=int(r["allocated"]))
            for r in rows
        ]

    def server_info(self, server_uuid: str) -> ServerInfo:
        for server in self.servers():
            if server.uuid == server_uuid:
                return server
        raise UnknownServerError(f"unknown server {server_uuid}")

    def server_status(self, server_uuid: str) -> str | None:
        """``running``, ``unknown`` or ``removed``; None for a server the fleet never had."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT status FROM sim_servers WHERE uuid = ?", (server_uuid,))
            row = tx.fetchone()
        return None if row is None else row["status"]

    def inventory(self, server_uuid: str) -> dict[str, PowerState]:
        with self.faults.around("inventory"):
            self._require_running(server_uuid)
            with self.db.transaction(commit=False) as tx:
                tx.execute("SELECT vm_uuid, state FROM sim_vms WHERE server_uuid = ? AND known = 1",
                           (server_uuid,))
                return {r["vm_uuid"]: r["state"] for r in tx.fetchall()}

    def ensure_registered(
        self, server_uuid: str, vm_uuid: str, *, ram_mib: int, metadata: dict[str, object],
        fence: Fence | None = None,
    ) -> None:
        with self.faults.around("ensure_registered"):
            # VMAPI's own tests make a provision fail this way.
            if str(metadata.get("force_provision_failure", "")).lower() == "true":
                raise ComputeError("provision failed: force_provision_failure was set")
            self._require_running(server_uuid)
            with self.db.transaction() as tx:
                admit(tx, server_uuid, vm_uuid, fence)
                _bump(tx, server_uuid)
                tx.execute(
                    "INSERT INTO sim_vms (vm_uuid, server_uuid, state, ram_mib, boots, known) "
                    "VALUES (?, ?, 'stopped', ?, 0, 1) "
                    "ON CONFLICT (vm_uuid, server_uuid) DO UPDATE SET known = 1",
                    (vm_uuid, server_uuid, ram_mib),
                )

    def observe(self, server_uuid: str, vm_uuid: str, *,
                fence: Fence | None = None) -> Incarnation | None:
        with self.faults.around("inventory"):
            self._require_running(server_uuid)
            with self.db.transaction() as tx:
                admit(tx, server_uuid, vm_uuid, fence)
                seq = _bump(tx, server_uuid)  # a look too: ordered against the rest
                row = self._copy(tx, server_uuid, vm_uuid)
        return None if row is None else _incarnation(row, server_uuid, seq)

    def ensure_state(self, server_uuid: str, vm_uuid: str, state: TargetState, *,
                     effect: str | None = None,
                     fence: Fence | None = None) -> Incarnation | None:
        with self.faults.around("ensure_state"):
            self._require_running(server_uuid)
            with self.db.transaction() as tx:
                admit(tx, server_uuid, vm_uuid, fence)
                seq = _bump(tx, server_uuid)
                row = self._copy(tx, server_uuid, vm_uuid)
                if row is None:
                    if state == "stopped":
                        return None  # not there: stopped there too
                    raise ComputeError(f"VM {vm_uuid} is not on server {server_uuid}")
                done_before = effect is not None and row["booted_by"] == effect
                running = row["state"] == "running"
                if state == "stopped":
                    if not running:
                        return _incarnation(row, server_uuid, seq)
                    tx.execute("UPDATE sim_vms SET state = 'stopped' "
                               "WHERE vm_uuid = ? AND server_uuid = ?", (vm_uuid, server_uuid))
                    return Incarnation("stopped", int(row["boots"]), row["booted_by"],
                                       server_uuid, seq)
                if done_before or running == (state == "running"):
                    # running and already running; rebooted and not running (the run it
                    # meant to end is over); or this very effect happened before
                    return _incarnation(row, server_uuid, seq)
                tx.execute("UPDATE sim_vms SET state = 'running', boots = boots + 1, "
                           "booted_by = ? WHERE vm_uuid = ? AND server_uuid = ?",
                           (effect, vm_uuid, server_uuid))
                return Incarnation("running", int(row["boots"]) + 1, effect, server_uuid, seq)

    @staticmethod
    def _copy(tx, server_uuid: str, vm_uuid: str) -> dict[str, object] | None:
        tx.execute("SELECT state, boots, booted_by FROM sim_vms "
                   "WHERE vm_uuid = ? AND server_uuid = ? AND known = 1", (vm_uuid, server_uuid))
        return tx.fetchone()

    def unregister(self, server_uuid: str, vm_uuid: str, *, fence: Fence | None = None) -> None:
        with self.faults.around("unregister"):
            self._require_running(server_uuid)
            with self.db.transaction() as tx:
                admit(tx, server_uuid, vm_uuid, fence)
                _bump(tx, server_uuid)
                tx.execute("DELETE FROM sim_vms WHERE vm_uuid = ? AND server_uuid = ?",
                           (vm_uuid, server_uuid))

    def raise_fence(self, server_uuid: str, vm_uuid: str, *, fence: Fence | None = None) -> None:
        with self.faults.around("inventory"):  # a look at the node, as ``observe``
            self._require_running(server_uuid)
            with self.db.transaction() as tx:
                admit(tx, server_uuid, vm_uuid, fence)

    def reconfigure(self, server_uuid: str, vm_uuid: str, changes: dict[str, object], *,
                    fence: Fence | None = None) -> None:
        with self.faults.around("reconfigure"):
            self._require_running(server_uuid)
            with self.db.transaction() as tx:
                admit(tx, server_uuid, vm_uuid, fence)
                _bump(tx, server_uuid)
                reconfigure_copy(tx, server_uuid, vm_uuid, changes)

    def config(self, server_uuid: str, vm_uuid: str) -> dict[str, Any] | None:
        """The configuration of the VM's copy on the server (``sim_config.copy_config``)."""
        with self.db.transaction(commit=False) as tx:
            return copy_config(tx, server_uuid, vm_uuid)

    def _require_running(self, server_uuid: str) -> None:
        server = self.server_info(server_uuid)
        if server.status == "removed":
            raise ServerRemovedError(f"server {server_uuid} is removed")
        if server.status != "running":
            raise ComputeError(f"server {server_uuid} is {server.status}")


def _incarnation(row: dict[str, object], server_uuid: str, seq: int) -> Incarnation:
    return Incarnation(row["state"], int(row["boots"]), row["booted_by"],  # type: ignore[arg-type]
                       server_uuid, seq)


def place(servers: list[ServerInfo], ram_mib: int) -> str | None:
    """The running server with the most free RAM that fits ``ram_mib`` (ties: by hostname),
    or None."""
    fitting = [s for s in servers if s.status == "running" and s.ram_free_mib >= ram_mib]
    if not fitting:
        return None
    return max(fitting, key=lambda s: (s.ram_free_mib, s.hostname)).uuid


__all__ = ["Operation", "SimulatedFleet", "place", "simulated_server_uuid"]
