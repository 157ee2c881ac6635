"""The simulated fleet's fences: the newest ``Fence`` each server has seen per VM
(``ComputeDriver``'s contract, service/jobs/compute/driver.py; docs/jobs.md, "Fencing"), kept
in the service's database with the simulated world, so every process checks against the same
one. A real compute node keeps its own, so a fence raised on one server refuses nothing on
another: the rows are keyed on ``(server_uuid, vm_uuid)``, and a job that must fence off a
lost worker has to reach every server that worker may call.

A fence is admitted in the transaction of the operation it guards, before the operation's
own statements: the upsert locks the fence's row until that transaction ends (PostgreSQL's
row lock; SQLite's write transactions are serial anyway), so two operations on one VM on one
server are ordered, and one with an older fence can never take effect there after one with a
newer fence. Fences are never removed: a VM unregistered, or its host rebooted, still refuses
its lost workers.
"""

from __future__ import annotations

from projections.db import Database, Tx
from projections.privileges import keep, privileges_of
from service.jobs.compute.driver import Fence, FencedOffError

FENCES_DDL = (
    ("CREATE TABLE IF NOT EXISTS sim_fences (server_uuid TEXT NOT NULL, vm_uuid TEXT NOT NULL, "
     "epoch BIGINT NOT NULL, job_uuid TEXT NOT NULL, PRIMARY KEY (server_uuid, vm_uuid))"),
)

# The column an older ``sim_fences`` (keyed on ``vm_uuid`` alone, one fence for the VM on
# every server) lacks: ``carry_per_vm_fences`` remakes such a table, and the schema check
# (service/schema_check.py) takes it for an older one of ours.
PER_VM_LACKS = ("sim_fences", "server_uuid")


def carry_per_vm_fences(db: Database, tx: Tx, columns: set[str] | None = None) -> int:
    """Remake an older per-VM ``sim_fences`` keyed per server, in ``tx``: each VM's fence is
    carried to every server the fleet has (``sim_servers``), so a lost worker it refused on
    any server is still refused on each. Returns the number of per-VM rows carried; 0, and
    nothing done, when the table already has ``server_uuid``. Run after ``FENCES_DDL``'s
    statement (which leaves an older table as it is) and under the schema lock; ``columns``
    are the table's columns if the caller read them since (else they are read here). The new
    table keeps the old one's owner and grants (``projections.privileges``)."""
    if PER_VM_LACKS[1] in (db.columns(tx, "sim_fences") if columns is None else columns):
        return 0
    # copied aside and dropped before the new table is made, so that it takes the old name's
    # constraint names too (PostgreSQL's sim_fences_pkey), as a new database's does
    tx.execute("CREATE TABLE sim_fences_per_vm AS SELECT vm_uuid, epoch, job_uuid FROM sim_fences")
    kept = privileges_of(tx, "sim_fences")
    tx.execute("DROP TABLE sim_fences")
    tx.execute(FENCES_DDL[0])
    keep(tx, "sim_fences", kept)  # the roles granted the old table keep their grants
    tx.execute("INSERT INTO sim_fences (server_uuid, vm_uuid, epoch, job_uuid) "
               "SELECT s.uuid, f.vm_uuid, f.epoch, f.job_uuid "
               "FROM sim_fences_per_vm f CROSS JOIN sim_servers s")
    tx.execute("SELECT count(*) AS carried FROM sim_fences_per_vm")
    carried = int(tx.fetchone()["carried"])
    tx.execute("DROP TABLE sim_fences_per_vm")
    return carried


def admit(tx: Tx, server_uuid: str, vm_uuid: str, fence: Fence | None) -> None:
    """Admit ``fence`` for an operation on the VM on the server, in ``tx``: remember it as
    the newest that server has seen for the VM unless a newer one was. Raises
    ``FencedOffError`` (the operation must not be done) when the server's newest epoch for
    the VM is above ``fence.epoch``. ``None`` admits nothing."""
    if fence is None:
        return
    tx.execute(
        "INSERT INTO sim_fences (server_uuid, vm_uuid, epoch, job_uuid) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (server_uuid, vm_uuid) DO UPDATE SET epoch = excluded.epoch, "
        "job_uuid = excluded.job_uuid WHERE sim_fences.epoch <= excluded.epoch RETURNING epoch",
        (server_uuid, vm_uuid, fence.epoch, fence.job_uuid),
    )
    if tx.fetchone() is not None:
        return
    tx.execute("SELECT epoch, job_uuid FROM sim_fences WHERE server_uuid = ? AND vm_uuid = ?",
               (server_uuid, vm_uuid))
    newest = tx.fetchone()
    raise FencedOffError(
        f"fenced off: VM {vm_uuid} has seen epoch {newest['epoch']} (job {newest['job_uuid']}) "
        f"on server {server_uuid}, newer than this call's epoch {fence.epoch} "
        f"(job {fence.job_uuid})")
