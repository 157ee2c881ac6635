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
from service.commands.change import IfMatch
from service.commands.idempotency import IdempotencyKey, Recorded, remembered


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
        return self.register_server_keyed(server_uuid, hostname=hostname, boot_id=boot_id,
                                          ram_mib=ram_mib, cpus=cpus, cause=cause)[1]

    def register_server_keyed(self, server_uuid: str, *, hostname: str, boot_id: str,
                              ram_mib: int, cpus: int, cause: Cause,
                              idempotency: IdempotencyKey | None = None
                              ) -> tuple[str, bool, int | None]:
        """``register_server`` for a request with an ``Idempotency-Key``: the server's uuid,
        whether it was recorded and the log position of its record (None: nothing was
        appended); a repeat of ``idempotency`` answers the first's uuid and status (its uuid
        may not be ``server_uuid``: POST /servers picks a new one each request). Raises
        ``IdempotencyKeyReusedError`` too."""

        def decide(server: Server) -> bool:
            if server.pending_events:  # registered by this change
                return True
            server.check_described_as(hostname=hostname, ram_mib=ram_mib, cpus=cpus)
            return False

        changed = self.change(
            Server, server_uuid, decide, idempotency_key=idempotency,
            outcome=lambda created, server: Recorded(str(server.id), 201 if created else 200,
                                                     server.version),
            new=lambda: Server.register(server_uuid=UUID(server_uuid), hostname=hostname,
                                        boot_id=boot_id, ram_mib=ram_mib, cpus=cpus,
                                        cause=cause))
        if changed.replayed is not None:
            return changed.replayed.uuid, changed.replayed.status == 201, None
        return server_uuid, changed.decision, changed.position

    def remove_server(self, server_uuid: str, *, cause: Cause, if_match: IfMatch = None,
                      idempotency: IdempotencyKey | None = None) -> int | None:
        """Record that the server left the fleet; the log position of the record (None:
        nothing appended: it already had, or a repeat of ``idempotency``). Raises
        ``ServerNotFoundError``, ``VersionMismatchError`` (``if_match`` is not the server's
        version) and ``IdempotencyKeyReusedError``."""
        return self.change(Server, server_uuid, lambda s: s.set_status("removed", cause=cause),
                    if_match=if_match, idempotency_key=idempotency,
                    outcome=remembered(200)).position


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
                      networks: dict[str, str] | None = None,
                      idempotency: IdempotencyKey | None = None) -> tuple[Volume, int | None]:
        """Record a new volume reachable on ``networks`` (``{network_uuid: address}``); returns
        it and the log position (None: a repeat of ``idempotency``, which answers the first's
        volume as it is now). Raises ``ValidationError`` (a bad address), ``UuidTakenError``
        (that uuid is taken, by any resource) and ``IdempotencyKeyReusedError``."""
        volume_id = UUID(volume_uuid) if volume_uuid else uuidlib.uuid4()

        def created(volume: Volume) -> None:
            if not volume.pending_events:  # the uuid was taken
                raise UuidTakenError(volume_id)

        return self._volume_changed(self.change(
            Volume, volume_id, created, idempotency_key=idempotency, outcome=remembered(201),
            new=lambda: Volume.create(volume_uuid=volume_id, name=name, cause=cause,
                                      networks=networks)))

    def _volume_changed(self, changed: Any) -> tuple[Volume, int | None]:
        """The volume a change saved and the log position, or, for a repeated
        ``Idempotency-Key``, the first's volume as it is now and None."""
        if changed.replayed is not None:
            return self.load_volume(changed.replayed.uuid), None
        return changed.aggregate, changed.position

    def attach_network(self, volume_uuid: str, network_uuid: str, address: str, *,
                       cause: Cause, if_match: IfMatch = None,
                       idempotency: IdempotencyKey | None = None) -> tuple[Volume, int | None]:
        """Make the volume reachable on ``network_uuid`` at ``address``; returns it and the log
        position (None: it already was). Raises ``VolumeNotFoundError``, ``ValidationError``,
        ``VersionMismatchError`` (``if_match`` is not its version), ``IdempotencyKeyReusedError``."""
        return self._volume_changed(self.change(
            Volume, volume_uuid, lambda v: v.attach_network(network_uuid, address, cause=cause),
            if_match=if_match, idempotency_key=idempotency, outcome=remembered(202)))

    def detach_network(self, volume_uuid: str, network_uuid: str, *,
                       cause: Cause, if_match: IfMatch = None,
                       idempotency: IdempotencyKey | None = None) -> tuple[Volume, int | None]:
        """Make the volume unreachable on ``network_uuid``; returns it and the log position
        (None: it was not on that network). Raises ``VolumeNotFoundError``,
        ``VersionMismatchError``, ``IdempotencyKeyReusedError``."""
        return self._volume_changed(self.change(
            Volume, volume_uuid, lambda v: v.detach_network(network_uuid, cause=cause),
            if_match=if_match, idempotency_key=idempotency, outcome=remembered(202)))
