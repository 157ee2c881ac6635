"""The ``Network`` aggregate: a subnet vmledger hands NIC addresses out of, and who holds each
(api.md ``/networks``; VMAPI CreateVm ``networks``).

Each address is claimed on the network's own stream, so two VMs asking at once for the last
free address conflict on the network's version (optimistic concurrency): one claim is
stored, the other writer reloads and takes another address or is refused. An address is
never held twice; it is released only by the VM that holds it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from uuid import UUID

from eventsourcing.domain import Aggregate

from domain import chain
from domain.errors import ValidationError
from domain.events import Cause, DomainEvent
from domain.json_input import cut
from domain.network_external import ExternalNetwork  # noqa: F401  (its topics, with Network's)

MAX_ADDRESSES = 65_536  # a provisioning range at most a /16: its claims fit one aggregate
# The longest prefix a subnet may have: a /31 or /32 has no address but its network and
# broadcast addresses, which are never handed out (RFC 3021's /31 links are not supported)
MAX_PREFIX = 30
# CIDR's prefix length: decimal digits with no leading zero, as an address's parts have none
# (ipaddress also reads "/024" as /24, and a netmask or host mask after the slash)
_PREFIX = re.compile(r"(?:0|[1-9][0-9]?)")


class NetworkFullError(ValidationError):
    """No address of the network's provisioning range is free."""

    def __init__(self, network_uuid: str):
        super().__init__("networks", "Invalid", f"network {network_uuid} has no free address")


class Network(chain.Chained, Aggregate):
    """A network: ``subnet`` (CIDR), the provisioning range ``provision_start_ip`` to
    ``provision_end_ip`` (inclusive), ``gateway``, and ``claims`` (``{ip: the uuid of the VM
    or volume holding it}``)."""

    TOPIC = "network"

    class Event(DomainEvent):
        """Base of every network event (its cause and chain link are ``DomainEvent``'s)."""

        TOPIC = "network.event"

    class Created(Event, Aggregate.Created):
        """A network was created; no address is claimed."""

        TOPIC = "network.created"
        name: str
        subnet: str
        provision_start_ip: str
        provision_end_ip: str
        gateway: str | None

        def apply(self, network: Network) -> None:
            network.name = self.name
            network.subnet = self.subnet
            network.provision_start_ip = self.provision_start_ip
            network.provision_end_ip = self.provision_end_ip
            network.gateway = self.gateway
            network.claims = {}

    class AddressClaimed(Event):
        """``ip`` is held by the NIC ``mac`` of VM ``vm_uuid``."""

        TOPIC = "network.address_claimed"
        ip: str
        vm_uuid: str
        mac: str

        def apply(self, network: Network) -> None:
            network.claims[self.ip] = self.vm_uuid

    class AddressReleased(Event):
        """``ip`` is free again."""

        TOPIC = "network.address_released"
        ip: str
        vm_uuid: str

        def apply(self, network: Network) -> None:
            network.claims.pop(self.ip, None)

    class VolumeAddressClaimed(Event):
        """``ip`` is a volume's (``volume_uuid``) address on this network."""

        TOPIC = "network.volume_address_claimed"
        ip: str
        volume_uuid: str

        def apply(self, network: Network) -> None:
            network.claims[self.ip] = self.volume_uuid

    class VolumeAddressReleased(Event):
        """``ip`` is free again: the volume left the network."""

        TOPIC = "network.volume_address_released"
        ip: str
        volume_uuid: str

        def apply(self, network: Network) -> None:
            network.claims.pop(self.ip, None)

    name: str
    subnet: str
    provision_start_ip: str
    provision_end_ip: str
    gateway: str | None
    claims: dict[str, str]
    chain_head: str

    def __init__(self) -> None:
        """State is set by ``Created.apply``; create networks with ``Network.create``."""

    @classmethod
    def create(cls, *, network_uuid: UUID, name: str, subnet: str, provision_start_ip: str,
               provision_end_ip: str, gateway: str | None, cause: Cause) -> Network:
        """Record a new network. Raises ``ValidationError`` naming the field: a subnet that is
        no IPv4 CIDR, a range outside it, reversed or over ``MAX_ADDRESSES``, a gateway
        outside the subnet or inside the range. A subnet is written as CIDR writes it: an
        address, then ``/`` and its prefix length in decimal with no leading zero."""
        try:
            if not _PREFIX.fullmatch(subnet.partition("/")[2]):
                raise ValueError(subnet)
            net = ipaddress.IPv4Network(subnet, strict=True)
        except ValueError:
            raise ValidationError("subnet", "Invalid", "must be an IPv4 CIDR, e.g. "
                                  "10.0.0.0/24") from None
        if net.prefixlen > MAX_PREFIX:
            raise ValidationError("subnet", "Invalid",
                                  f"must be a /{MAX_PREFIX} or larger: a /{net.prefixlen} has no "
                                  "host address (its network and broadcast addresses are never "
                                  "handed out)")
        start = _address_in(net, "provision_start_ip", provision_start_ip)
        end = _address_in(net, "provision_end_ip", provision_end_ip)
        if end < start:
            raise ValidationError("provision_end_ip", "Invalid",
                                  "must not be before provision_start_ip")
        if int(end) - int(start) + 1 > MAX_ADDRESSES:
            raise ValidationError("provision_end_ip", "Invalid",
                                  f"a range holds at most {MAX_ADDRESSES} addresses")
        if gateway is not None:
            gw = _address_in(net, "gateway", gateway)
            if start <= gw <= end:
                raise ValidationError("gateway", "Invalid",
                                      "must be outside the provisioning range")
            gateway = str(gw)
        return cls._create(cls.Created, id=network_uuid, cause=cause, name=name,
                           subnet=str(net), provision_start_ip=str(start),
                           provision_end_ip=str(end), gateway=gateway)

    @property
    def size(self) -> int:
        """How many addresses the provisioning range holds."""
        start = ipaddress.IPv4Address(self.provision_start_ip)
        return int(ipaddress.IPv4Address(self.provision_end_ip)) - int(start) + 1

    @property
    def netmask(self) -> str:
        """The subnet's netmask (``255.255.255.0``), as VMAPI's NIC objects give it."""
        return str(ipaddress.IPv4Network(self.subnet).netmask)

    def next_free(self, taken: set[str] = frozenset()) -> str:  # type: ignore[assignment]
        """The lowest free address of the range, not in ``taken``. Raises
        ``NetworkFullError``."""
        start = int(ipaddress.IPv4Address(self.provision_start_ip))
        for offset in range(self.size):
            ip = str(ipaddress.IPv4Address(start + offset))
            if ip not in self.claims and ip not in taken:
                return ip
        raise NetworkFullError(str(self.id))

    def check_claimable(self, ip: str) -> str:
        """``ip`` normalised, if a VM's NIC or a volume may ask for it. Raises
        ``ValidationError`` (field ``networks``) for an address outside the subnet, the
        gateway or one held (by a NIC or a volume)."""
        net = ipaddress.IPv4Network(self.subnet)
        try:
            address = ipaddress.IPv4Address(ip)
        except ValueError:
            raise ValidationError("networks", "Invalid",
                                  f"{cut(ip)} is not an IPv4 address") from None
        if address not in net or address in (net.network_address, net.broadcast_address):
            raise ValidationError("networks", "Invalid",
                                  f"{cut(ip)} is not a host address of {self.subnet}")
        if str(address) == self.gateway:
            raise ValidationError("networks", "Invalid", f"{cut(ip)} is the gateway")
        if str(address) in self.claims:
            raise ValidationError("networks", "Duplicate", f"{cut(ip)} is already in use")
        return str(address)

    def claim(self, ip: str, *, vm_uuid: str, mac: str, cause: Cause) -> None:
        """Record that VM ``vm_uuid``'s NIC ``mac`` holds ``ip``. Raises ``ValidationError``
        when the address is held (``check_claimable``)."""
        ip = self.check_claimable(ip)
        self.trigger_event(self.AddressClaimed, cause=cause, ip=ip, vm_uuid=vm_uuid, mac=mac)

    def claim_for_volume(self, ip: str, *, volume_uuid: str, cause: Cause) -> None:
        """Record that volume ``volume_uuid`` is reachable at ``ip`` here; nothing if it
        already holds it. Raises ``ValidationError`` when the address is not claimable
        (``check_claimable``)."""
        if self.claims.get(ip) == volume_uuid:
            return
        ip = self.check_claimable(ip)
        self.trigger_event(self.VolumeAddressClaimed, cause=cause, ip=ip,
                           volume_uuid=volume_uuid)

    def claim_noted(self, addresses: dict[str, str], *, cause: Cause) -> None:
        """At the network's creation, claim the addresses (``{volume_uuid: ip}``) volumes were
        given on its uuid while vmledger did not know it (``ExternalNetwork``). Raises
        ``ValidationError`` naming ``uuid`` for one it cannot hold (``check_claimable``: no
        host address of the subnet, the gateway, or two volumes' one address), whose
        volume must be detached first, or the network given a subnet holding it."""
        for volume_uuid, ip in addresses.items():
            try:
                self.claim_for_volume(ip, volume_uuid=volume_uuid, cause=cause)
            except ValidationError as error:
                (refusal,) = error.errors
                raise ValidationError(
                    "uuid", refusal["code"],
                    f"volume {volume_uuid} is at {ip} on network {self.id}: "
                    f"{refusal['message']}; detach it from the network first, or give the "
                    "network a subnet that holds its address") from None

    def release_for_volume(self, volume_uuid: str, *, cause: Cause) -> None:
        """Free the address volume ``volume_uuid`` holds here (it holds one at most: a volume
        is on a network at one address); nothing recorded if it holds none."""
        for ip, holder in self.claims.items():
            if holder == volume_uuid:
                self.trigger_event(self.VolumeAddressReleased, cause=cause, ip=ip,
                                   volume_uuid=volume_uuid)
                return

    def release(self, ip: str, *, vm_uuid: str, cause: Cause) -> bool:
        """Free ``ip`` if VM ``vm_uuid`` holds it; False (nothing recorded) otherwise."""
        if self.claims.get(ip) != vm_uuid:
            return False
        self.trigger_event(self.AddressReleased, cause=cause, ip=ip, vm_uuid=vm_uuid)
        return True


def in_provisioning_range(start: str, end: str, ip: str) -> bool:
    """Whether ``ip`` lies from ``start`` to ``end`` (inclusive). The one rule of which
    claims the range figures count (``range_counts``, ``network_view``): an address asked
    for by a NIC may lie anywhere in the subnet, but only the range is handed out and counted
    in ``addresses_total``."""
    return (ipaddress.IPv4Address(start) <= ipaddress.IPv4Address(ip)
            <= ipaddress.IPv4Address(end))


def range_counts(start: str, end: str, claimed: Iterable[str]) -> tuple[int, int]:
    """``(in use, outside the range)``: how many of the addresses ``claimed`` lie in the
    provisioning range ``start`` to ``end`` (``in_provisioning_range``), and how many in the
    subnet outside it (asked for by address: ``check_claimable`` allows them). The range's
    free addresses are ``Network.size`` less the first, never below zero."""
    ips = list(claimed)
    in_use = sum(1 for ip in ips if in_provisioning_range(start, end, ip))
    return in_use, len(ips) - in_use


def _address_in(net: ipaddress.IPv4Network, field: str, value: str) -> ipaddress.IPv4Address:
    try:
        address = ipaddress.IPv4Address(value)
    except ValueError:
        raise ValidationError(field, "Invalid", "must be an IPv4 address") from None
    if address not in net or address in (net.network_address, net.broadcast_address):
        raise ValidationError(field, "Invalid", f"must be a host address of {net}")
    return address
