"""Where a VM is: the server it is on and the servers a copy of it may be on. A mixin of
``domain.vm.Vm``, read by the rules table (``has_server``) and by the jobs that must find the
VM's copy (service/jobs/copies.py)."""

from __future__ import annotations

from typing import Any


class Placement:
    """The VM's server and claim, read together."""

    # Provided by ``Vm``.
    server_uuid: str | None
    claim: dict[str, Any] | None
    copy_may_be_on: list[str]  # set by ProvisionFailed
    claimed_servers: list[str]  # set by CapacityClaimed, never cleared

    @property
    def has_server(self) -> bool:
        """Whether the VM is on a compute node (the rules table's ``has_server``)."""
        return self.server_uuid is not None

    @property
    def shown_server_uuid(self) -> str | None:
        """The ``server_uuid`` the VM object shows (GetVm, ListVms and its filters, sort and
        markers, the changes): the VM's server, or while it has none, the server it holds a
        claim on: a provisioning VM placed but not yet created there. VMAPI's createVm
        allocates the server before the provision job and stores the VM with it
        (sdc-vmapi ``lib/endpoints/vms.js``), so its clients see it at once. Only what is
        shown: ``server_uuid`` and ``has_server`` still say whether the VM is on a server
        (the rules table, the jobs and the takeovers read those), and a VM on a server shows
        that one, even while a start places it anew elsewhere."""
        if self.server_uuid is not None:
            return self.server_uuid
        return (self.claim or {}).get("server_uuid")

    @property
    def copy_servers(self) -> list[str]:
        """The servers a copy of the VM may be on, each once: its server (``server_uuid``),
        then the server it holds a claim on, then those its failed provision could not rule
        out (``copy_may_be_on``). A provision, or a start that places the VM anew,
        creates the copy on the server it claimed before it records that server, so a job
        ended between the two (canceled by a quarantine, say) leaves a copy where only the
        claim tells; and a provision that fails gives its claim back, so a copy it could not
        remove (its server did not answer, the removal failed) is told only by its
        ``ProvisionFailed``, of which only the servers it claimed count (``may_hold_a_copy``:
        a ``ProvisionFailed`` stored before named every server that did not answer). Empty
        when none is known: no compute node was touched."""
        servers = [self.server_uuid, (self.claim or {}).get("server_uuid"),
                   *self.may_hold_a_copy(self.copy_may_be_on)]
        return list(dict.fromkeys(server for server in servers if server is not None))

    def may_hold_a_copy(self, servers: list[str]) -> list[str]:
        """Those of ``servers`` a copy of the VM may be on: the ones it ever held a claim on
        (``claimed_servers``, its ``CapacityClaimed`` events), each once, in order. Placement
        claims a server before it creates the VM there, so a server the VM never claimed has
        no copy of it, whether or not it answers (docs/jobs.md, "Takeovers")."""
        return [server for server in dict.fromkeys(servers) if server in self.claimed_servers]
