"""Commands on the fleet's other aggregates: servers (capacity claims, design.md "Server
aggregate") and volumes (design.md "Volume aggregate"). Mixins of ``service.application.Commands``,
whose ``app``, ``save``, ``retries`` and ``on_conflict`` they use."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError

from domain.errors import ServerNotFoundError, ValidationError, VolumeNotFoundError
from domain.server import Server
from domain.vm import Cause, Vm
from domain.volume import Volume
from service.commands.retry import ConflictRetriesExhaustedError, back_off

R = TypeVar("R")


class _UsesCommands:
    # Provided by ``Commands``.
    app: Any
    retries: int
    enforce_capacity: bool
    on_conflict: Callable[[], None]
    save: Callable[..., int]


class ServerCommands(_UsesCommands):
    """Servers and the claims VMs hold on them."""

    def _server_effects(self, vm: Vm, servers: dict[str, Server] | None = None) -> list[Server]:
        """The servers' side of the VM's pending claims and releases, to save with it in one
        transaction (so both streams always agree); ``servers`` are ones already loaded for
        the same transaction. Raises ``InsufficientCapacityError``."""
        servers = {} if servers is None else servers
        for event in vm.pending_events:
            if isinstance(event, Vm.CapacityClaimed | Vm.CapacityReleased):
                server = servers.get(event.server_uuid) or self.load_server(event.server_uuid)
                servers[event.server_uuid] = server
                if isinstance(event, Vm.CapacityClaimed):
                    server.claim(str(vm.id), ram_mib=event.ram_mib, cpus=event.cpus,
                                 cause=event.cause, enforce=self.enforce_capacity)
                else:
                    server.release(str(vm.id), cause=event.cause)
        return [server for server in servers.values() if server.pending_events]

    def load_server(self, server_uuid: str | UUID) -> Server:
        """The server folded from its stream. Raises ``ServerNotFoundError``."""
        try:
            server_id = server_uuid if isinstance(server_uuid, UUID) else UUID(str(server_uuid))
            server = self.app.repository.get(server_id)
        except (AggregateNotFoundError, ValueError):
            raise ServerNotFoundError(server_uuid) from None
        if not isinstance(server, Server):
            raise ServerNotFoundError(server_uuid)
        return server

    def register_server(self, server_uuid: str, *, hostname: str, boot_id: str, ram_mib: int,
                        cpus: int, cause: Cause) -> bool:
        """Record a compute node; False (nothing recorded) if it is already known."""
        server = Server.register(server_uuid=UUID(server_uuid), hostname=hostname,
                                 boot_id=boot_id, ram_mib=ram_mib, cpus=cpus, cause=cause)
        try:
            self.save(server)
        except IntegrityError:
            return False
        return True

    def change_server(self, server_uuid: str, decide: Callable[[Server], R]) -> tuple[R, Server]:
        """Load the server, ``decide``, save; on a conflict reload and decide again."""
        for attempt in range(self.retries):
            server = self.load_server(server_uuid)
            decision = decide(server)
            if not server.pending_events:
                return decision, server
            try:
                self.save(server)
            except IntegrityError:
                self.on_conflict()
                back_off(attempt)
                continue
            return decision, server
        raise ConflictRetriesExhaustedError(f"server {server_uuid}: conflicting writes")


class VolumeCommands(_UsesCommands):
    """Volumes and the networks they are reachable on."""

    def load_volume(self, volume_uuid: str | UUID) -> Volume:
        """The volume folded from its stream. Raises ``VolumeNotFoundError``."""
        try:
            volume_id = volume_uuid if isinstance(volume_uuid, UUID) else UUID(str(volume_uuid))
            volume = self.app.repository.get(volume_id)
        except (AggregateNotFoundError, ValueError):
            raise VolumeNotFoundError(volume_uuid) from None
        if not isinstance(volume, Volume):
            raise VolumeNotFoundError(volume_uuid)  # another aggregate's stream
        return volume

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
        it and the log position. Raises ``ValidationError`` (a bad address; ``uuid``
        Duplicate when that uuid is taken)."""
        volume = Volume.create(volume_uuid=UUID(volume_uuid) if volume_uuid else uuidlib.uuid4(),
                               name=name, cause=cause, networks=networks)
        try:
            return volume, self.save(volume)
        except IntegrityError:
            raise ValidationError("uuid", "Duplicate", "already exists") from None

    def attach_network(self, volume_uuid: str, network_uuid: str, address: str, *,
                       cause: Cause) -> tuple[Volume, int | None]:
        """Make the volume reachable on ``network_uuid`` at ``address``; returns it and the log
        position (None: it already was). Raises ``VolumeNotFoundError``, ``ValidationError``."""
        return self._change_volume(
            volume_uuid, lambda v: v.attach_network(network_uuid, address, cause=cause))

    def detach_network(self, volume_uuid: str, network_uuid: str, *,
                       cause: Cause) -> tuple[Volume, int | None]:
        """Make the volume unreachable on ``network_uuid``; returns it and the log position
        (None: it was not on that network). Raises ``VolumeNotFoundError``."""
        return self._change_volume(
            volume_uuid, lambda v: v.detach_network(network_uuid, cause=cause))

    def _change_volume(self, volume_uuid: str, decide: Callable[[Volume], object]
                       ) -> tuple[Volume, int | None]:
        for attempt in range(self.retries):
            volume = self.load_volume(volume_uuid)
            decide(volume)
            if not volume.pending_events:
                return volume, None
            try:
                return volume, self.save(volume)
            except IntegrityError:
                self.on_conflict()
                back_off(attempt)
        raise ConflictRetriesExhaustedError(f"volume {volume_uuid}: conflicting writes")
