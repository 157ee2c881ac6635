"""Servers an operator recorded as removed (``POST /servers/{uuid}?action=remove``, the
server's ``StatusChanged`` event) are removed for the job worker too, whatever the compute
driver still reports: the log is the system of record for which servers are in the fleet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from service.jobs.compute.driver import (
    ComputeDriver, Fence, Incarnation, PowerState, ServerInfo, ServerRemovedError,
    TargetState,
)

REMOVED = "removed"


class RecordedRemovalsRefused:
    """A ``ComputeDriver`` that acts as ``driver`` does, except on a server whose status in
    the log (``recorded_status(server_uuid)``: ``running``, ``unknown``, ``removed``, or
    None for a server the log does not have) is ``removed``: every operation on it but
    ``raise_fence`` raises ``ServerRemovedError("server <uuid> is removed")``, the error a
    driver gives for a server it reports removed itself, and ``servers``/``server_info`` show it ``removed``. So a job
    step on such a server fails as it would had the node reported it gone (api.md,
    DeleteVm v1: "a destroy job that fails"). This holds for a job only as far as its steps
    call the driver: a handler must ask the node through it (``reconfigure`` for an update
    or a NIC change) rather than record a step no node was asked for."""

    def __init__(self, driver: ComputeDriver, recorded_status: Callable[[str], str | None]):
        self.driver = driver
        self.recorded_status = recorded_status

    def _removed(self, server_uuid: str) -> bool:
        return self.recorded_status(server_uuid) == REMOVED

    def _refuse_removed(self, server_uuid: str) -> None:
        if self._removed(server_uuid):
            raise ServerRemovedError(f"server {server_uuid} is {REMOVED}")

    def _as_recorded(self, server: ServerInfo) -> ServerInfo:
        return (dataclasses.replace(server, status=REMOVED) if self._removed(server.uuid)
                else server)

    def servers(self) -> list[ServerInfo]:
        """Every server the driver knows, ``removed`` where the log says so."""
        return [self._as_recorded(server) for server in self.driver.servers()]

    def server_info(self, server_uuid: str) -> ServerInfo:
        """The driver's server, ``removed`` where the log says so. Raises ``ComputeError``
        if the driver does not know it."""
        return self._as_recorded(self.driver.server_info(server_uuid))

    def inventory(self, server_uuid: str) -> dict[str, PowerState]:
        self._refuse_removed(server_uuid)
        return self.driver.inventory(server_uuid)

    def ensure_registered(self, server_uuid: str, vm_uuid: str, *, ram_mib: int,
                          metadata: dict[str, object], fence: Fence | None = None) -> None:
        self._refuse_removed(server_uuid)
        self.driver.ensure_registered(server_uuid, vm_uuid, ram_mib=ram_mib, metadata=metadata,
                                      fence=fence)

    def observe(self, server_uuid: str, vm_uuid: str, *,
                fence: Fence | None = None) -> Incarnation | None:
        self._refuse_removed(server_uuid)
        return self.driver.observe(server_uuid, vm_uuid, fence=fence)

    def ensure_state(self, server_uuid: str, vm_uuid: str, state: TargetState, *,
                     effect: str | None = None,
                     fence: Fence | None = None) -> Incarnation | None:
        self._refuse_removed(server_uuid)
        return self.driver.ensure_state(server_uuid, vm_uuid, state, effect=effect, fence=fence)

    def unregister(self, server_uuid: str, vm_uuid: str, *, fence: Fence | None = None) -> None:
        self._refuse_removed(server_uuid)
        self.driver.unregister(server_uuid, vm_uuid, fence=fence)

    def raise_fence(self, server_uuid: str, vm_uuid: str, *, fence: Fence | None = None) -> None:
        """Asked of a removed server too: a fence changes nothing there and only refuses more,
        and the node of a server an operator recorded removed may still take a call that a
        worker began before the removal (docs/jobs.md, "A quarantine while a job runs")."""
        self.driver.raise_fence(server_uuid, vm_uuid, fence=fence)

    def reconfigure(self, server_uuid: str, vm_uuid: str, changes: dict[str, object], *,
                    fence: Fence | None = None) -> None:
        self._refuse_removed(server_uuid)
        self.driver.reconfigure(server_uuid, vm_uuid, changes, fence=fence)
