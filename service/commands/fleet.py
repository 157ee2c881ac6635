"""Commands on the fleet's other aggregates: servers (capacity claims, design.md "Server
aggregate") and volumes (design.md "Volume aggregate"). Mixins of
``service.commands.application.Commands``, whose change loop (``service.commands.change``)
they use."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any
from uuid import UUID

from domain.errors import UuidTakenError, ValidationError, VolumeNotFoundError
from domain.server import Server
from domain.vm import Cause
from domain.volume import Volume


class _UsesCommands:
    # Provided by ``Commands`` (``service.commands.change.Changes``).
    change: Any
    load_aggregate: Any


class ServerCommands(_UsesCommands):
    """Servers and the claims VMs hold on them."""

    def load_server(self, server_uuid: str | UUID) -> Server:
        """The server folded from its stream. Raises ``ServerNotFoundError``."""
        return self.load_aggregate(Server, server_uuid)

    def register_server(self, server_uuid: str, *, hostname: str, boot_id: str, ram_mib: int,
                        cpus: int, cause: Cause) -> bool:
        """Record a compute node; False (nothing recorded) if it is already known as
        described. Raises ``ValidationError`` naming ``uuid`` if it is known with another
        hostname, RAM or CPUs (``Server.check_described_as``)."""

        def decide(server: Server) -> bool:
            if server.pending_events:  # registered by this change
                return True
            server.check_described_as(hostname=hostname, ram_mib=ram_mib, cpus=cpus)
            return False

        changed = self.change(
            Server, server_uuid, decide,
            new=lambda: Server.register(server_uuid=UUID(server_uuid), hostname=hostname,
                                        boot_id=boot_id, ram_mib=ram_mib, cpus=cpus,
                                        cause=cause))
        return changed.decision


class VolumeCommands(_UsesCommands):
    """Volumes and the networks they are reachable on (their addresses on the networks
    vmledger knows are claimed there by the change loop: service/commands/networks.py)."""

    def load_volume(self, volume_uuid: str | UUID) -> Volume:
        """The volume folded from its stream. Raises ``VolumeNotFoundError``."""
        return self.load_aggregate(Volume, volume_uuid)

    def _check_volumes(self, mounts: list[dict[str, str]]) -> None:
        """Raises ``ValidationError`` naming ``volumes`` unless every volume to mount exists."""
        for mount in mounts:
            try:
                self.load_volume(mount["volume_uuid"])
            except VolumeNotFoundError:
                raise ValidationError("volumes", "Invalid",
                                      f"volume {mount['volume_uuid']} not found") from None

    def create_volume(self, *, name: str, cause: Cause, volume_uuid: str | None = None,
                      networks: dict[str, str] | None = None) -> tuple[Volume, int]:
        """Record a new volume reachable on ``networks`` (``{network_uuid: address}``); returns
        it and the log position. Raises ``ValidationError`` (a bad address) and
        ``UuidTakenError`` (that uuid is taken, by any resource)."""
        volume_id = UUID(volume_uuid) if volume_uuid else uuidlib.uuid4()

        def created(volume: Volume) -> None:
            if not volume.pending_events:  # the uuid was taken
                raise UuidTakenError(volume_id)

        _, volume, position, _ = self.change(
            Volume, volume_id, created,
            new=lambda: Volume.create(volume_uuid=volume_id, name=name, cause=cause,
                                      networks=networks))
        return volume, position

    def attach_network(self, volume_uuid: str, network_uuid: str, address: str, *,
                       cause: Cause, if_match: int | None = None) -> tuple[Volume, int | None]:
        """Make the volume reachable on ``network_uuid`` at ``address``; returns it and the log
        position (None: it already was). Raises ``VolumeNotFoundError``, ``ValidationError``,
        ``VersionMismatchError`` (``if_match`` is not its version)."""
        _, volume, position, _ = self.change(
            Volume, volume_uuid, lambda v: v.attach_network(network_uuid, address, cause=cause),
            if_match=if_match)
        return volume, position

    def detach_network(self, volume_uuid: str, network_uuid: str, *,
                       cause: Cause, if_match: int | None = None) -> tuple[Volume, int | None]:
        """Make the volume unreachable on ``network_uuid``; returns it and the log position
        (None: it was not on that network). Raises ``VolumeNotFoundError``,
        ``VersionMismatchError``."""
        _, volume, position, _ = self.change(
            Volume, volume_uuid, lambda v: v.detach_network(network_uuid, cause=cause),
            if_match=if_match)
        return volume, position
