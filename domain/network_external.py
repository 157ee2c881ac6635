"""The ``ExternalNetwork`` aggregate: the volumes' addresses on a network uuid vmledger does not
know yet, kept so that a network later created with that uuid claims them (api.md
``/volumes``; a tester found a NIC handed the address of a volume attached before its network
existed).

Its stream is keyed by ``external_id(network_uuid)``, never the network's own uuid, so
creating the network stays a new stream. The volume's attach or detach to a network vmledger
does not know records here in the volume's transaction, and ``POST /networks`` with that uuid
records ``Adopted`` here in the network's create transaction (the network taking over the
addresses noted): the two writers meet on this stream's version, so whichever commits second
conflicts and decides again on the other's state. No address is left unclaimed that way.
"""

from __future__ import annotations

from uuid import UUID

from eventsourcing.domain import Aggregate

from domain import chain
from domain.derived_ids import derived_id
from domain.events import Cause, DomainEvent

# The namespace of ``external_id`` (fixed: stored streams are keyed by it)
NAMESPACE = UUID("7c1f4a52-0e55-4d1b-9a0c-2f6d7e3b8a41")


def external_id(network_uuid: str) -> UUID:
    """The uuid of the ``ExternalNetwork`` stream of ``network_uuid`` (a uuid in any case),
    marked so no client's resource can take it (``domain.derived_ids``)."""
    return derived_id(NAMESPACE, str(UUID(str(network_uuid))))


class ExternalNetwork(chain.Chained, Aggregate):
    """The volumes on network ``network_uuid`` while vmledger does not know it: ``addresses``
    (``{volume_uuid: address}``), and ``adopted`` once the network was created, which took
    them over (the aggregate then notes nothing more: the network holds the claims)."""

    TOPIC = "external_network"

    class Event(DomainEvent):
        """Base of every external network event."""

        TOPIC = "external_network.event"

    class Created(Event, Aggregate.Created):
        """The first volume was attached to ``network_uuid``, or the network was created."""

        TOPIC = "external_network.created"
        network_uuid: str

        def apply(self, external: ExternalNetwork) -> None:
            external.network_uuid = self.network_uuid
            external.addresses = {}
            external.adopted = False

    class VolumeAddressNoted(Event):
        """Volume ``volume_uuid`` is at ``ip`` on the network."""

        TOPIC = "external_network.volume_address_noted"
        ip: str
        volume_uuid: str

        def apply(self, external: ExternalNetwork) -> None:
            external.addresses[self.volume_uuid] = self.ip

    class VolumeAddressForgotten(Event):
        """Volume ``volume_uuid`` left the network."""

        TOPIC = "external_network.volume_address_forgotten"
        volume_uuid: str

        def apply(self, external: ExternalNetwork) -> None:
            external.addresses.pop(self.volume_uuid, None)

    class Adopted(Event):
        """The network was created, claiming every address noted here."""

        TOPIC = "external_network.adopted"

        def apply(self, external: ExternalNetwork) -> None:
            external.addresses = {}
            external.adopted = True

    network_uuid: str
    addresses: dict[str, str]
    adopted: bool
    chain_head: str

    def __init__(self) -> None:
        """State is set by ``Created.apply``; create these with ``ExternalNetwork.create``."""

    @classmethod
    def create(cls, network_uuid: str, *, cause: Cause) -> ExternalNetwork:
        """A new stream for ``network_uuid``, noting no address yet."""
        return cls._create(cls.Created, id=external_id(network_uuid), cause=cause,
                           network_uuid=str(network_uuid))

    def note(self, ip: str, *, volume_uuid: str, cause: Cause) -> None:
        """Record that volume ``volume_uuid`` is at ``ip`` here (nothing if it already is)."""
        if self.addresses.get(volume_uuid) != ip:
            self.trigger_event(self.VolumeAddressNoted, cause=cause, ip=ip,
                               volume_uuid=volume_uuid)

    def forget(self, volume_uuid: str, *, cause: Cause) -> None:
        """Record that volume ``volume_uuid`` left (nothing if it was not here)."""
        if volume_uuid in self.addresses:
            self.trigger_event(self.VolumeAddressForgotten, cause=cause,
                               volume_uuid=volume_uuid)

    def adopt(self, *, cause: Cause) -> None:
        """Record that the network was created: it claims what is noted here (the caller
        claims them in the same transaction)."""
        self.trigger_event(self.Adopted, cause=cause)
