"""The ``ComputeDriver`` protocol (design.md, "Compute nodes").

Every operation is idempotent by VM uuid: repeating it after a crash or a lost response
changes nothing more (Omicron's register/ensure split, so a replayed step cannot restart a VM
the guest shut down).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

PowerState = Literal["running", "stopped", "failed"]
TargetState = Literal["running", "stopped", "rebooted"]


class ComputeError(Exception):
    """A compute node could not do what was asked (the job records the message)."""


class NoCapacityError(ComputeError):
    """No server has room for the VM."""


@dataclass(frozen=True)
class ServerInfo:
    """A compute node as its agent describes it; RAM in MiB."""

    uuid: str
    hostname: str
    boot_id: str
    ram_mib: int
    cpus: int
    ram_allocated_mib: int
    status: str = "running"

    @property
    def ram_free_mib(self) -> int:
        return self.ram_mib - self.ram_allocated_mib


class ComputeDriver(Protocol):
    """What the worker may ask of the compute nodes."""

    def servers(self) -> list[ServerInfo]:
        """Every known server."""

    def server_info(self, server_uuid: str) -> ServerInfo:
        """One server. Raises ``ComputeError`` if unknown."""

    def inventory(self, server_uuid: str) -> dict[str, PowerState]:
        """The VMs the server has, by uuid, with their power state."""

    def ensure_registered(
        self, server_uuid: str, vm_uuid: str, *, ram_mib: int, metadata: dict[str, object]
    ) -> None:
        """Make sure the VM exists on the server (created stopped if absent)."""

    def ensure_state(self, server_uuid: str, vm_uuid: str, state: TargetState) -> None:
        """Make sure the VM is in ``state`` (``rebooted``: reboot it, ending running)."""

    def unregister(self, server_uuid: str, vm_uuid: str) -> None:
        """Make sure the VM no longer exists on the server."""
