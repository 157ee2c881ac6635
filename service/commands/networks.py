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

A volume's address on a network vmledger does not know is noted on that uuid's
``ExternalNetwork`` stream (domain/network_external.py) in the volume's transaction, and a
network created later with that uuid claims every address noted there in its create
transaction, recording ``Adopted`` on that stream: an attach racing the create conflicts on
it and decides again, finding the network. A noted address the network cannot hold (no host
address of its subnet, its gateway, two volumes' one address) refuses the create.
"""

from __future__ import annotations

import ipaddress
import secrets
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from domain.errors import UuidTakenError, ValidationError
from domain.json_input import cut
from domain.network import Network
from domain.network_external import ExternalNetwork, external_id
from domain.vm import Cause, Vm
from domain.volume import Volume
from service.commands.idempotency import IdempotencyKey, remembered


class NetworkNotFoundError(ValidationError):
    """No network with this uuid: a ``networks`` entry naming none is bad input."""

    def __init__(self, network_uuid: str | UUID):
        super().__init__("networks", "Invalid", f"network {cut(network_uuid)} not found")
        self.network_uuid = str(network_uuid)


@dataclass(frozen=True)
class NicRequest:
    """One NIC asked for: on ``network_uuid``, at ``ip`` (else the lowest free address)."""

    network_uuid: str
    ip: str | None = None
    primary: bool = False


def _normal(ip: str) -> str:
    """``ip`` in its normal form, if it is an IPv4 address (else as given: its claim refuses
    it)."""
    try:
        return str(ipaddress.IPv4Address(ip))
    except ValueError:
        return ip


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
        ``ValidationError`` (a bad subnet or range; naming ``uuid``, an address a volume
        has on this network uuid that the network cannot hold: ``Network.claim_noted``),
        ``UuidTakenError`` (that uuid is taken, by any resource) and
        ``IdempotencyKeyReusedError``. The volumes' addresses noted on this uuid while no
        network had it (``ExternalNetwork``) are claimed in the same transaction."""
        network_id = UUID(network_uuid) if network_uuid else uuidlib.uuid4()
        noted: list[ExternalNetwork] = []

        def decide(network: Network) -> None:
            noted.clear()
            if not network.pending_events:  # the uuid was taken
                raise UuidTakenError(network_id)
            # always written, even with nothing noted: a volume attaching to this uuid at
            # the same moment then conflicts here, and attaches again to the network
            external = self._load_external(str(network_id))
            if external is None:
                external = ExternalNetwork.create(str(network_id), cause=cause)
            if not external.adopted:
                network.claim_noted(external.addresses, cause=cause)
                external.adopt(cause=cause)
                noted.append(external)

        changed = self.change(
            Network, network_id, decide, idempotency_key=idempotency, outcome=remembered(201),
            also=lambda _: list(noted),
            new=lambda: Network.create(
                network_uuid=network_id, name=name, subnet=subnet,
                provision_start_ip=provision_start_ip, provision_end_ip=provision_end_ip,
                gateway=gateway, cause=cause))
        if changed.replayed is not None:
            return self.load_network(changed.replayed.uuid), None
        return changed.aggregate, changed.position

    def allocate(self, vm: Vm, requests: list[NicRequest], *, cause: Cause) -> list[Network]:
        """Claim an address for each of ``requests`` on freshly loaded networks and record the
        NICs on ``vm``: the address asked for, else the lowest free one that no other request
        asks for (whatever their order); returns the networks, to be saved in the VM's
        transaction (the change loop's ``also``). Raises ``NetworkNotFoundError`` (before
        any claim), ``NetworkFullError`` and ``ValidationError`` (an address taken or outside
        the subnet)."""
        networks: dict[str, Network] = {}
        for request in requests:
            key = request.network_uuid.lower()
            if key not in networks:
                networks[key] = self.load_network(request.network_uuid)
        # an address handed out automatically is none another NIC of the request asks for
        asked: dict[str, set[str]] = {}
        for request in requests:
            if request.ip:
                asked.setdefault(request.network_uuid.lower(), set()).add(_normal(request.ip))
        nics: list[dict[str, Any]] = []
        for request in requests:
            key = request.network_uuid.lower()
            network = networks[key]
            ip = (network.check_claimable(request.ip) if request.ip
                  else network.next_free(asked.get(key, set())))
            mac = new_mac()
            network.claim(ip, vm_uuid=str(vm.id), mac=mac, cause=cause)
            nics.append({"mac": mac, "ip": ip, "netmask": network.netmask,
                         "gateway": network.gateway, "network_uuid": str(network.id),
                         "primary": request.primary})
        vm.add_nics(nics, cause=cause)
        return list(networks.values())

    def _network_effects(self, changed: Vm | Volume, networks: dict[str, Any]) -> None:
        """Record on ``networks`` (loaded into it as needed) the networks' side of a VM's or a
        volume's pending events: the releases of the addresses of a VM's NICs removed
        (``NicsRemoved``) or of a VM destroyed (``Destroyed``: every NIC it holds, from its
        own stream, unless it kept them for its fence job, which releases them later:
        ``AddressesReleased``); a volume's address claimed on a network it is attached to
        (``NetworkAttached``: refused if a NIC or another volume holds it), released on one
        it leaves (``NetworkDetached``). A network vmledger does not know (an external one)
        has no claims: the volume's address there is noted (or forgotten) on its
        ``ExternalNetwork`` stream, for the network created with that uuid to claim. Raises
        ``ValidationError`` (an address held)."""
        owner = str(changed.id)
        for event in changed.pending_events:
            if isinstance(event, Volume.NetworkAttached | Volume.NetworkDetached):
                self._volume_effect(event, owner, networks)
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

    def _volume_effect(self, event: Volume.NetworkAttached | Volume.NetworkDetached,
                       volume_uuid: str, networks: dict[str, Any]) -> None:
        """The network's side of a volume's attach or detach (``_network_effects``): a claim
        or release on a network vmledger knows, else a note on its ``ExternalNetwork``. One
        adopted since the network was looked for means the network exists now: the claim is
        made there."""
        attached = isinstance(event, Volume.NetworkAttached)
        network = self._known_network(event.network_uuid, networks)
        if network is None:
            external = self._external(event.network_uuid, networks, event.cause,
                                      create=attached)
            if external is None or not external.adopted:
                if external is not None and isinstance(event, Volume.NetworkAttached):
                    external.note(event.address, volume_uuid=volume_uuid, cause=event.cause)
                elif external is not None:
                    external.forget(volume_uuid, cause=event.cause)
                return
            network = self._known_network(event.network_uuid, networks)
            assert network is not None  # only the network's create adopts
        if isinstance(event, Volume.NetworkAttached):
            network.claim_for_volume(event.address, volume_uuid=volume_uuid, cause=event.cause)
        else:
            network.release_for_volume(volume_uuid, cause=event.cause)

    def _external(self, network_uuid: str, networks: dict[str, Any], cause: Cause, *,
                  create: bool) -> ExternalNetwork | None:
        """The ``ExternalNetwork`` of ``network_uuid`` from ``networks`` (under
        ``external:<uuid>``), else loaded into it, else (``create``) made; None when it has no
        stream and ``create`` is false."""
        key = f"external:{network_uuid}"
        external = networks.get(key)
        if external is None:
            external = self._load_external(network_uuid)
            if external is None:
                if not create:
                    return None
                external = ExternalNetwork.create(network_uuid, cause=cause)
            networks[key] = external
        return external

    def _load_external(self, network_uuid: str) -> ExternalNetwork | None:
        """The ``ExternalNetwork`` of ``network_uuid`` folded from its stream; None if none."""
        try:
            return self.load_aggregate(ExternalNetwork, external_id(network_uuid))
        except NetworkNotFoundError:
            return None

    def _known_network(self, network_uuid: str, networks: dict[str, Any]
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
