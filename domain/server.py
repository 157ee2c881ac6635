"""The ``Server`` aggregate: a compute node as the control plane records it (design.md,
"Server aggregate").

Placement claims capacity on the server's stream with optimistic concurrency, in the same
transaction as the VM records the claim; destroy and failure release it the same way, so the
sum of a server's claims always equals what the VMs' streams say is placed there.
"""

from __future__ import annotations

from uuid import UUID

from eventsourcing.domain import Aggregate

from domain import chain
from domain.events import Cause, DomainEvent
from domain.errors import DomainError, StaleGenerationError, ValidationError

SERVER_STATUSES = ("running", "unknown", "removed")


class InsufficientCapacityError(DomainError):
    """The server has not that much RAM (MiB) or CPUs free, or is not running."""

    def __init__(self, server_uuid: str, reason: str):
        super().__init__(f"server {server_uuid}: {reason}")
        self.server_uuid = server_uuid


class Server(chain.Chained, Aggregate):
    """A compute node: identity, boot id, status, capacity, and the VMs' claims on it."""

    TOPIC = "server"

    class Event(DomainEvent):
        """Base of every server event (its cause and chain link are ``DomainEvent``'s)."""

        TOPIC = "server.event"

    class Registered(Event, Aggregate.Created):
        """A compute node joined the fleet."""

        TOPIC = "server.registered"
        hostname: str
        boot_id: str
        ram_mib: int
        cpus: int

        def apply(self, server: Server) -> None:
            server.hostname = self.hostname
            server.boot_id = self.boot_id
            server.ram_mib = self.ram_mib
            server.cpus = self.cpus
            server.status = "running"
            server.claims = {}
            server.generation = 0

    class Claimed(Event):
        """A VM was placed here and holds ``ram_mib`` MiB and ``cpus`` CPUs."""

        TOPIC = "server.claimed"
        vm_uuid: str
        ram_mib: int
        cpus: int

        def apply(self, server: Server) -> None:
            server.claims[self.vm_uuid] = {"ram_mib": self.ram_mib, "cpus": self.cpus}

    class ClaimReleased(Event):
        """A VM's claim was given back (it was destroyed, failed, or never provisioned)."""

        TOPIC = "server.claim_released"
        vm_uuid: str

        def apply(self, server: Server) -> None:
            server.claims.pop(self.vm_uuid, None)

    class Rebooted(Event):
        """The host rebooted: it has a new boot id."""

        TOPIC = "server.rebooted"
        boot_id: str

        def apply(self, server: Server) -> None:
            server.boot_id = self.boot_id

    class StatusChanged(Event):
        """The server's status changed (``running``, ``unknown``, ``removed``)."""

        TOPIC = "server.status_changed"
        status: str

        def apply(self, server: Server) -> None:
            server.status = self.status

    class ReportApplied(Event):
        """An agent report with this generation changed something (Omicron generations)."""

        TOPIC = "server.report_applied"
        generation: int

        def apply(self, server: Server) -> None:
            server.generation = self.generation

    hostname: str
    boot_id: str
    ram_mib: int
    cpus: int
    status: str
    claims: dict[str, dict[str, int]]
    generation: int


    def __init__(self) -> None:
        """State is set by ``Registered.apply``; create servers with ``Server.register``."""

    @classmethod
    def register(cls, *, server_uuid: UUID, hostname: str, boot_id: str, ram_mib: int,
                 cpus: int, cause: Cause) -> Server:
        """Record a new compute node with ``ram_mib`` MiB and ``cpus`` CPUs."""
        return cls._create(cls.Registered, id=server_uuid, cause=cause, hostname=hostname,
                           boot_id=boot_id, ram_mib=ram_mib, cpus=cpus)

    def check_described_as(self, *, hostname: str, ram_mib: int, cpus: int) -> None:
        """Raise ``ValidationError`` naming ``uuid`` (``Duplicate``) unless this server was
        registered with this hostname, RAM and CPUs: a registration repeated with another
        description would otherwise be answered as if it had been taken."""
        asked = {"hostname": hostname, "ram_mib": ram_mib, "cpus": cpus}
        differing = [name for name, value in asked.items() if getattr(self, name) != value]
        if differing:
            raise ValidationError("uuid", "Duplicate",
                                  f"server {self.id} is registered with another "
                                  f"{', '.join(differing)}")

    @property
    def ram_allocated_mib(self) -> int:
        return sum(c["ram_mib"] for c in self.claims.values())

    @property
    def cpus_allocated(self) -> int:
        return sum(c["cpus"] for c in self.claims.values())

    def claim(self, vm_uuid: str, *, ram_mib: int, cpus: int, cause: Cause,
              enforce: bool = True) -> None:
        """Place ``vm_uuid`` here. Raises ``InsufficientCapacityError`` when the server is not
        running or (with ``enforce``) has not the RAM or CPUs free. A VM already claimed here
        keeps its claim (nothing is recorded)."""
        if vm_uuid in self.claims:
            return
        if self.status != "running":
            raise InsufficientCapacityError(str(self.id), f"it is {self.status}")
        if enforce and self.ram_allocated_mib + ram_mib > self.ram_mib:
            raise InsufficientCapacityError(
                str(self.id), f"{self.ram_mib - self.ram_allocated_mib} MiB free, {ram_mib} asked")
        if enforce and self.cpus_allocated + cpus > self.cpus:
            raise InsufficientCapacityError(
                str(self.id), f"{self.cpus - self.cpus_allocated} CPUs free, {cpus} asked")
        self.trigger_event(self.Claimed, cause=cause, vm_uuid=vm_uuid, ram_mib=ram_mib, cpus=cpus)

    def record_found(self, vm_uuid: str, *, ram_mib: int, cpus: int, cause: Cause) -> None:
        """A VM its agent found here (``Vm.Discovered``) holds ``ram_mib`` MiB and ``cpus``
        CPUs: a fact the host reports, so it is recorded whatever is free and whatever the
        server's status, even past its capacity (an overcommit placement then heeds). A VM
        already claimed here keeps its claim (nothing is recorded)."""
        if vm_uuid in self.claims:
            return
        self.trigger_event(self.Claimed, cause=cause, vm_uuid=vm_uuid, ram_mib=ram_mib, cpus=cpus)

    def release(self, vm_uuid: str, *, cause: Cause) -> bool:
        """Give back ``vm_uuid``'s claim; False (nothing recorded) if it holds none."""
        if vm_uuid not in self.claims:
            return False
        self.trigger_event(self.ClaimReleased, cause=cause, vm_uuid=vm_uuid)
        return True

    def record_reboot(self, boot_id: str, *, cause: Cause) -> bool:
        """The host came back with ``boot_id``; False (nothing recorded) if it is the same."""
        if boot_id == self.boot_id:
            return False
        self.trigger_event(self.Rebooted, cause=cause, boot_id=boot_id)
        return True

    def set_status(self, status: str, *, cause: Cause) -> bool:
        """Change the status; False (nothing recorded) if it already is. Raises ``ValueError``
        for an unknown status."""
        if status not in SERVER_STATUSES:
            raise ValueError(f"unknown server status {status!r}")
        if status == self.status:
            return False
        self.trigger_event(self.StatusChanged, cause=cause, status=status)
        return True

    def check_generation(self, generation: int) -> None:
        """Raises ``StaleGenerationError`` unless ``generation`` is newer than the last report
        applied (a replayed or late agent report changes nothing)."""
        if generation <= self.generation:
            raise StaleGenerationError(str(self.id), generation, self.generation)

    def record_report(self, generation: int, *, cause: Cause) -> None:
        """Remember that the report with ``generation`` changed something."""
        self.check_generation(generation)
        self.trigger_event(self.ReportApplied, cause=cause, generation=generation)
