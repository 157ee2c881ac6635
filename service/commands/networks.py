"""Networks and the NICs VMs hold on them (domain/network.py, domain/vm_nics.py). A mixin of
``service.commands.application.Commands``, whose ``app``, ``save`` and change loop it uses.

An address is claimed on the network's stream in the same transaction as the VM's
``NicsAdded`` (CreateVm with ``networks``, ``add_nics``), so a claim that loses the race for
an address to another writer stores nothing and the change loop retries with a fresh load:
no address is ever handed out twice. Addresses are released in the same transaction as the
VM's ``NicsRemoved`` (``remove_nics``, a failed ``add_nics``, a failed provision: VMAPI
TRITON-394) or ``Destroyed`` (every NIC it still holds: sdc-vmapi #72 leaked a destroyed
VM's; or, when a destroy at once canceled a running job, the ``AddressesReleased`` of its
``fence`` job, once no late call of that job can reach a node), from what the VM's own
stream says it holds, so a failed provision's addresses are
free at once and its destroy has none left to release. A volume's address on a network
follows its ``NetworkAttached`` and ``NetworkDetached`` the same way. The change loop records
each of these on the networks (``_network_effects``).
"""

from __future__ import annotations

import secrets
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from domain.errors import UuidTakenError, ValidationError
from domain.network import Network
from domain.vm import Cause, Vm
from domain.volume import Volume
from service.commands.idempotency import IdempotencyKey, remembered


class NetworkNotFoundError(ValidationError):
    """No network with this uuid: a ``networks`` entry naming none is bad input."""

    def __init__(self, network_uuid: str | UUID):
        super().__init__("networks", "Invalid", f"network {network_uuid} not found")
        self.network_uuid = str(network_uuid)


@dataclass(frozen=True)
class NicRequest:
    """One NIC asked for: on ``network_uuid``, at ``ip`` (else the lowest free address)."""

    network_uuid: str
    ip: str | None = None
    primary: bool = False


def new_mac() -> str:
    """A random, locally administered unicast MAC address (``x2:…``)."""
    octets = [0x02 | (secrets.randbits(8) & 0xFC), *(secrets.randbits(8) for _ in range(5))]
    return ":".join(f"{octet:02x}" for octet in octets)


class NetworkCommands:
    """Networks, and the address claims NICs hold on them. Uses ``Commands``' change loop
    (``change``, ``load_aggregate``)."""

    change: Any
    load_aggregate: Any

    def load_network(self, network_uuid: str | UUID) -> Network:
        """The network folded from its stream. Raises ``NetworkNotFoundError``."""
        return self.load_aggregate(Network, network_uuid)

    def create_network(self, *, name: str, subnet: str, provision_start_ip: str,
                       provision_end_ip: str, gateway: str | None, cause: Cause,
                       network_uuid: str | None = None,
                       idempotency: IdempotencyKey | None = None) -> tuple[Network, int | None]:
        """Record a new network; returns it and the log position (None: a repeat of
        ``idempotency``, which answers the first's network as it is now). Raises
        ``ValidationError`` (a bad subnet or range), ``UuidTakenError`` (that uuid is taken,
        by any resource) and ``IdempotencyKeyReusedError``."""
        network_id = UUID(network_uuid) if network_uuid else uuidlib.uuid4()

        def decide(network: Network) -> None:
            if not network.pending_events:  # the uuid was taken
                raise UuidTakenError(network_id)

        changed = self.change(
            Network, network_id, decide, idempotency_key=idempotency, outcome=remembered(201),
            new=lambda: Network.create(
                network_uuid=network_id, name=name, subnet=subnet,
                provision_start_ip=provision_start_ip, provision_end_ip=provision_end_ip,
                gateway=gateway, cause=cause))
        if changed.replayed is not None:
            return self.load_network(changed.replayed.uuid), None
        return changed.aggregate, changed.position

    def allocate(self, vm: Vm, requests: list[NicRequest], *, cause: Cause) -> list[Network]:
        """Claim an address for each of ``requests`` on freshly loaded networks and record the
        NICs on ``vm``; returns the networks, to be saved in the VM's transaction (the change
        loop's ``also``). Raises ``NetworkNotFoundError``, ``NetworkFullError`` and
        ``ValidationError`` (an address taken or outside the subnet)."""
        networks: dict[str, Network] = {}
        nics: list[dict[str, Any]] = []
        for request in requests:
            network = networks.get(request.network_uuid) or self.load_network(
                request.network_uuid)
            networks[request.network_uuid] = network
            ip = network.check_claimable(request.ip) if request.ip else network.next_free()
            mac = new_mac()
            network.claim(ip, vm_uuid=str(vm.id), mac=mac, cause=cause)
            nics.append({"mac": mac, "ip": ip, "netmask": network.netmask,
                         "gateway": network.gateway, "network_uuid": str(network.id),
                         "primary": request.primary})
        vm.add_nics(nics, cause=cause)
        return list(networks.values())

    def _network_effects(self, changed: Vm | Volume, networks: dict[str, Network]) -> None:
        """Record on ``networks`` (loaded into it as needed) the networks' side of a VM's or a
        volume's pending events: the releases of the addresses of a VM's NICs removed
        (``NicsRemoved``) or of a VM destroyed (``Destroyed``: every NIC it holds, from its
        own stream, unless it kept them for its fence job, which releases them later:
        ``AddressesReleased``); a volume's address claimed on a network it is attached to
        (``NetworkAttached``: refused if a NIC or another volume holds it), released on one
        it leaves (``NetworkDetached``). A network vmledger does not know (an external one)
        has no claims. Raises ``ValidationError`` (an address held)."""
        owner = str(changed.id)
        for event in changed.pending_events:
            if isinstance(event, Volume.NetworkAttached | Volume.NetworkDetached):
                network = self._known_network(event.network_uuid, networks)
                if network is not None and isinstance(event, Volume.NetworkAttached):
                    network.claim_for_volume(event.address, volume_uuid=owner,
                                             cause=event.cause)
                elif network is not None:
                    network.release_for_volume(owner, cause=event.cause)
                continue
            if isinstance(event, Vm.NicsRemoved | Vm.AddressesReleased):
                released = event.nics
            elif isinstance(event, Vm.Destroyed) and not event.addresses_kept:
                assert isinstance(changed, Vm)
                released = changed.nic_list
            else:
                continue
            for nic in released:
                network = self._known_network(nic["network_uuid"], networks)
                if network is not None:
                    network.release(nic["ip"], vm_uuid=owner, cause=event.cause)

    def _known_network(self, network_uuid: str, networks: dict[str, Network]
                       ) -> Network | None:
        """The network ``network_uuid`` from ``networks``, else loaded into it; None for one
        vmledger does not know."""
        network = networks.get(network_uuid)
        if network is None:
            try:
                network = networks[network_uuid] = self.load_network(network_uuid)
            except NetworkNotFoundError:
                return None
        return network
