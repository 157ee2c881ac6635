"""The simulated fleet's fences: the newest ``Fence`` seen per VM (``ComputeDriver``'s contract,
service/jobs/compute/driver.py; docs/jobs.md, "Fencing"), kept in the service's database with
the simulated world, so every process checks against the same one.

A VM's fence is admitted in the transaction of the operation it guards, before the operation's
own statements: the upsert locks the VM's fence row until that transaction ends (PostgreSQL's
row lock; SQLite's write transactions are serial anyway), so two operations on one VM are
ordered, and one with an older fence can never take effect after one with a newer fence.
Fences are never removed: a VM unregistered, or its host rebooted, still refuses its lost
workers.
"""

from __future__ import annotations

from projections.db import Tx
from service.jobs.compute.driver import Fence, FencedOffError

FENCES_DDL = (
    ("CREATE TABLE IF NOT EXISTS sim_fences (vm_uuid TEXT PRIMARY KEY, epoch BIGINT NOT NULL, "
     "job_uuid TEXT NOT NULL)"),
)


def admit(tx: Tx, vm_uuid: str, fence: Fence | None) -> None:
    """Admit ``fence`` for an operation on the VM in ``tx``: remember it as the VM's newest
    unless a newer one was seen. Raises ``FencedOffError`` (the operation must not be done)
    when the VM's newest epoch is above ``fence.epoch``. ``None`` admits nothing."""
    if fence is None:
        return
    tx.execute(
        "INSERT INTO sim_fences (vm_uuid, epoch, job_uuid) VALUES (?, ?, ?) "
        "ON CONFLICT (vm_uuid) DO UPDATE SET epoch = excluded.epoch, job_uuid = excluded.job_uuid "
        "WHERE sim_fences.epoch <= excluded.epoch RETURNING epoch",
        (vm_uuid, fence.epoch, fence.job_uuid),
    )
    if tx.fetchone() is not None:
        return
    tx.execute("SELECT epoch, job_uuid FROM sim_fences WHERE vm_uuid = ?", (vm_uuid,))
    newest = tx.fetchone()
    raise FencedOffError(
        f"fenced off: VM {vm_uuid} has seen epoch {newest['epoch']} (job {newest['job_uuid']}), "
        f"newer than this call's epoch {fence.epoch} (job {fence.job_uuid})")
