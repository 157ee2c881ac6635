"""What one change saves beside the aggregates it decided on: the other streams' side of
their events, so the streams always agree (step 5 of ``service.commands.change``).

The holds of the aliases the VMs take and give up (``_alias_effects``,
service/commands/aliases.py), the servers' side of the VMs' capacity claims and releases
(``_server_effects``, here), and the networks' side of the VMs' and the volumes' addresses
(``_network_effects``, service/commands/networks.py), all in the change's one save.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from domain.alias_hold import AliasHold, HoldKey
from domain.network import Network
from domain.server import Server
from domain.vm import Vm
from domain.volume import Volume


class CrossStreamEffects:
    """A mixin of ``Changes``; ``Commands`` and its other mixins provide the rest."""

    enforce_capacity: bool
    load_aggregate: Callable[..., Any]  # service.commands.loader.Loader
    _network_effects: Callable[[Vm | Volume, dict[str, Any]], None]  # NetworkCommands
    unique_aliases: bool  # AliasCommands: off, nothing about aliases is read or written
    _alias_effects: Callable[..., None]  # AliasCommands
    holds_before: Callable[[Vm], frozenset[HoldKey]]  # AliasCommands

    def _pending(self, aggregate: Vm | Server | Volume, others: list[Vm | Server | Volume],
                 before: dict[int, frozenset[HoldKey]] | None = None
                 ) -> list[Vm | Server | Volume]:
        """Everything to save, holds, servers and networks last: the aggregates, the holds of
        the aliases the VMs take and give up (``before``: what a VM held as loaded, by
        ``id()``; one not in it is read again), the servers' side of the VMs' capacity
        claims and releases, and the networks' side of the VMs' and the volumes' addresses
        (so the streams always agree)."""
        changed = [aggregate, *others]
        servers = {str(s.id): s for s in changed if isinstance(s, Server)}
        networks = {str(n.id): n for n in changed if isinstance(n, Network)}
        holds: dict[UUID, AliasHold] = {}
        for one in changed:
            if self.unique_aliases and isinstance(one, Vm) and one.pending_events:
                held = (before or {}).get(id(one))
                self._alias_effects(  # service/commands/aliases.py
                    one, self.holds_before(one) if held is None else held, holds)
            if isinstance(one, Vm):
                self._server_effects(one, servers)
            if isinstance(one, Vm | Volume):
                self._network_effects(one, networks)  # service/commands/networks.py
        ordered = [a for a in changed if not isinstance(a, Server | Network)] + list(
            holds.values()) + list(servers.values()) + list(networks.values())
        return [a for a in ordered if a.pending_events]

    def _server_effects(self, vm: Vm, servers: dict[str, Server]) -> None:
        """Record on ``servers`` (loaded into it as needed) the VM's pending claims and
        releases. Raises ``InsufficientCapacityError``, except for a VM found by its agent
        (saved with its ``Discovered``): its claim is a fact, recorded even past capacity."""
        found = any(isinstance(event, Vm.Discovered) for event in vm.pending_events)
        for event in vm.pending_events:
            if isinstance(event, Vm.CapacityClaimed | Vm.CapacityReleased):
                server = servers.get(event.server_uuid)
                if server is None:
                    server = servers[event.server_uuid] = self.load_aggregate(
                        Server, event.server_uuid)
                if isinstance(event, Vm.CapacityClaimed) and found:
                    server.record_found(str(vm.id), ram_mib=event.ram_mib, cpus=event.cpus,
                                        cause=event.cause)
                elif isinstance(event, Vm.CapacityClaimed):
                    server.claim(str(vm.id), ram_mib=event.ram_mib, cpus=event.cpus,
                                 cause=event.cause, enforce=self.enforce_capacity)
                else:
                    server.release(str(vm.id), cause=event.cause)
