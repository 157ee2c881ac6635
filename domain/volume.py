"""The ``Volume`` aggregate: a shared volume, the networks it is reachable on and its address on
each (design.md, "Volume aggregate"; lesson 6, Triton ZAPI-793).

VMs mount volumes by address. Attaching or detaching a network changes the volume's addresses
under the VMs that mount it, which keep the addresses they were given when they booted until
they boot again (``projections/volume_mounts.py`` lists the VMs that need a reboot).
"""

from __future__ import annotations

import ipaddress
from uuid import UUID

from eventsourcing.domain import Aggregate

from domain import chain
from domain.errors import ValidationError
from domain.events import Cause, DomainEvent

#: The most networks a volume is on (``POST /volumes`` refuses more, an attach past it too).
MAX_NETWORKS = 32


def mount_address(networks: dict[str, str]) -> str | None:
    """The address a VM mounting a volume on ``networks`` (``{network_uuid: address}``, in the
    order they were attached) is given: every address, comma-separated, the first attached
    first; None when the volume is on no network. Any attach or detach changes it."""
    return ",".join(networks.values()) or None



ADDRESS_TEXT = "must be an IPv4 or IPv6 address, with no zone id"


def volume_address(text: str) -> str:
    """``text`` as a volume address in its normal form. Raises ``ValidationError`` naming
    ``address`` when it is no IPv4 or IPv6 address, or when it carries an IPv6 zone id
    (``fe80::1%eth0``): a zone names an interface of one host, so it is no address another
    host's VM can mount, and it may be any text at all (a tester stored markup and 5,000
    characters through it)."""
    try:
        parsed = ipaddress.ip_address(text)
    except ValueError:
        raise ValidationError("address", "Invalid", ADDRESS_TEXT) from None
    if getattr(parsed, "scope_id", None) is not None:
        raise ValidationError("address", "Invalid", ADDRESS_TEXT)
    return str(parsed)


class Volume(chain.Chained, Aggregate):
    """A volume: its name and ``networks`` (``{network_uuid: address}``, attach order)."""

    TOPIC = "volume"

    class Event(DomainEvent):
        """Base of every volume event (its cause and chain link are ``DomainEvent``'s)."""

        TOPIC = "volume.event"

    class Created(Event, Aggregate.Created):
        """A volume was created, on no network yet."""

        TOPIC = "volume.created"
        name: str

        def apply(self, volume: Volume) -> None:
            volume.name = self.name
            volume.networks = {}

    class NetworkAttached(Event):
        """The volume is reachable on ``network_uuid`` at ``address``."""

        TOPIC = "volume.network_attached"
        network_uuid: str
        address: str

        def apply(self, volume: Volume) -> None:
            volume.networks[self.network_uuid] = self.address

    class NetworkDetached(Event):
        """The volume is no longer reachable on ``network_uuid``."""

        TOPIC = "volume.network_detached"
        network_uuid: str

        def apply(self, volume: Volume) -> None:
            volume.networks.pop(self.network_uuid, None)

    name: str
    networks: dict[str, str]
    chain_head: str

    def __init__(self) -> None:
        """State is set by ``Created.apply``; create volumes with ``Volume.create``."""

    @classmethod
    def create(cls, *, volume_uuid: UUID, name: str, cause: Cause,
               networks: dict[str, str] | None = None) -> Volume:
        """Record a new volume, then attach it to ``networks`` (``{network_uuid: address}``).
        Raises ``ValidationError`` for a bad address or one given twice."""
        volume = cls._create(cls.Created, id=volume_uuid, cause=cause, name=name)
        for network_uuid, address in (networks or {}).items():
            volume.attach_network(network_uuid, address, cause=cause)
        return volume

    @property
    def address(self) -> str | None:
        """The address VMs mounting the volume are given (``mount_address``)."""
        return mount_address(self.networks)

    def attach_network(self, network_uuid: str, address: str, *, cause: Cause) -> bool:
        """Make the volume reachable on ``network_uuid`` at ``address`` (an IPv4 or IPv6
        address). False (nothing recorded) if it already is, at that address. Raises
        ``ValidationError`` for a bad address, one the volume has on another network, a
        network it is already on at another address (detach it first), or a network past
        ``MAX_NETWORKS``."""
        address = volume_address(address)
        current = self.networks.get(network_uuid)
        if current == address:
            return False
        if current is not None:
            raise ValidationError("network_uuid", "Duplicate",
                                  f"already attached at {current}: detach it first")
        if address in self.networks.values():
            raise ValidationError("address", "Duplicate", "the volume has it on another network")
        if len(self.networks) >= MAX_NETWORKS:
            raise ValidationError("network_uuid", "Invalid",
                                  f"the volume is on {MAX_NETWORKS} networks, the most it may "
                                  "be on: detach one first")
        self.trigger_event(self.NetworkAttached, cause=cause, network_uuid=network_uuid,
                           address=address)
        return True

    def detach_network(self, network_uuid: str, *, cause: Cause) -> bool:
        """Make the volume unreachable on ``network_uuid``; False (nothing recorded) if it is
        not on that network."""
        if network_uuid not in self.networks:
            return False
        self.trigger_event(self.NetworkDetached, cause=cause, network_uuid=network_uuid)
        return True
