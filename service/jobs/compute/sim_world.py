"""What happens to the simulated world outside any job (fault injection, docs/simulation.md):
host reboots, agent restarts, a server's status, guests that shut down or crash; and what its
agents report. A mixin of ``service.jobs.compute.simulated.SimulatedFleet``, over the same
tables; ``bump`` numbers each happening on a server (its ``seq``, as every operation there
does: service/jobs/compute/simulated.py).
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from service.jobs.compute.driver import ServerInfo


class SimulatedWorld:
    """The simulated fleet's happenings and reports."""

    db: Any
    server_info: Callable[[str], ServerInfo]  # SimulatedFleet's

    def reboot_server(self, server_uuid: str) -> str:
        """The host reboots: a new boot id, and every VM on it is gone. Returns the boot id."""
        self.server_info(server_uuid)
        boot_id = str(uuidlib.uuid4())
        with self.db.transaction() as tx:
            bump(tx, server_uuid)
            tx.execute("UPDATE sim_servers SET boot_id = ? WHERE uuid = ?", (boot_id, server_uuid))
            tx.execute("DELETE FROM sim_vms WHERE server_uuid = ?", (server_uuid,))
        return boot_id

    def restart_agent(self, server_uuid: str) -> None:
        """The compute agent restarts with the same boot id and forgets its VMs: they keep
        running, but it no longer reports or manages them."""
        self.server_info(server_uuid)
        with self.db.transaction() as tx:
            bump(tx, server_uuid)
            tx.execute("UPDATE sim_vms SET known = 0 WHERE server_uuid = ?", (server_uuid,))

    def set_server_status(self, server_uuid: str, status: str) -> None:
        """Mark a server ``running``, ``unknown`` or ``removed``."""
        self.server_info(server_uuid)
        with self.db.transaction() as tx:
            tx.execute("UPDATE sim_servers SET status = ? WHERE uuid = ?", (status, server_uuid))

    def shut_down_guest(self, vm_uuid: str) -> None:
        """The guest powers itself off on every server it runs on."""
        with self.db.transaction() as tx:
            bump_servers_of(tx, vm_uuid)
            tx.execute("UPDATE sim_vms SET state = 'stopped' WHERE vm_uuid = ?", (vm_uuid,))

    def crash_guest(self, vm_uuid: str) -> None:
        """The guest crashes on every server it runs on (its agent reports it ``failed``)."""
        with self.db.transaction() as tx:
            bump_servers_of(tx, vm_uuid)
            tx.execute("UPDATE sim_vms SET state = 'failed' WHERE vm_uuid = ? AND state = 'running'",
                       (vm_uuid,))

    def report(self, server_uuid: str) -> dict[str, object]:
        """The agent's next inventory report: its boot id, a generation one higher than the
        last, the server's sequence number it is as of (``seq``: the server row is updated
        first, so no operation there happens between reading it and reading the VMs), and the
        state and incarnation of every VM it knows (``PUT /vms?server_uuid=``'s body)."""
        server = self.server_info(server_uuid)
        with self.db.transaction() as tx:
            tx.execute("UPDATE sim_servers SET generation = generation + 1 WHERE uuid = ? "
                       "RETURNING generation, seq", (server_uuid,))
            numbers = tx.fetchone()
            generation, seq = int(numbers["generation"]), int(numbers["seq"])
            tx.execute("SELECT vm_uuid, state, boots FROM sim_vms "
                       "WHERE server_uuid = ? AND known = 1", (server_uuid,))
            vms = {r["vm_uuid"]: {"state": r["state"], "incarnation": int(r["boots"])}
                   for r in tx.fetchall()}
        return {"boot_id": server.boot_id, "generation": generation, "seq": seq, "vms": vms}

    def copies(self, vm_uuid: str) -> list[dict[str, object]]:
        """Every copy of the VM in the simulated world, known to its agent or not, with its
        boot count (the number of its latest incarnation) and the effect that began it."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT server_uuid, state, boots, known, booted_by FROM sim_vms "
                       "WHERE vm_uuid = ? ORDER BY server_uuid", (vm_uuid,))
            return tx.fetchall()

    def inventory_all(self, server_uuid: str) -> list[dict[str, object]]:
        """Every VM copy on the server, known to its agent or not (no faults applied)."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT vm_uuid, state, boots, known FROM sim_vms WHERE server_uuid = ? "
                       "ORDER BY vm_uuid", (server_uuid,))
            return tx.fetchall()

    def running_copies(self, vm_uuid: str) -> int:
        """How many copies of the VM are running (must never exceed 1)."""
        return sum(1 for copy in self.copies(vm_uuid) if copy["state"] == "running")

    def boots(self, vm_uuid: str) -> int:
        """How many times the simulated VM was booted, over all its copies."""
        return sum(int(copy["boots"]) for copy in self.copies(vm_uuid))


def bump(tx: Any, server_uuid: str) -> int:
    """Bump the server's sequence number and return it. First in a transaction: the row's
    lock then orders it against every other operation there and every report."""
    tx.execute("UPDATE sim_servers SET seq = seq + 1 WHERE uuid = ? RETURNING seq",
               (server_uuid,))
    row = tx.fetchone()
    return 0 if row is None else int(row["seq"])


def bump_servers_of(tx: Any, vm_uuid: str) -> None:
    """Bump the sequence number of every server with a copy of the VM (a guest's happening)."""
    tx.execute("UPDATE sim_servers SET seq = seq + 1 WHERE uuid IN "
               "(SELECT server_uuid FROM sim_vms WHERE vm_uuid = ?)", (vm_uuid,))
