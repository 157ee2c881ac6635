"""A job's view of the compute driver: every operation it makes on a VM carries the fence of
its claim, and the driver's refusal of that fence is the job taken from this worker (docs/jobs.md,
"Fencing"; the contract is ``ComputeDriver``'s, service/jobs/compute/driver.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from domain.errors import JobNotRunnableError
from service.jobs.compute.driver import (
    ComputeDriver, Fence, FencedOffError, Incarnation, TargetState,
)

R = TypeVar("R")


class FencedDriver:
    """``driver`` with ``fence`` given to each operation on a VM. A ``FencedOffError`` (a
    newer holder of the VM's job, or a later job, reached the driver first) is raised as
    ``JobNotRunnableError``, as a save refused for the same reason is: the worker records
    nothing more and logs the job as taken from it. Anything else (``servers``,
    ``server_info``, ``inventory``, which name no VM) is the driver's own."""

    def __init__(self, driver: ComputeDriver, fence: Fence):
        self.driver = driver
        self.fence = fence

    def __getattr__(self, name: str) -> Any:
        return getattr(self.driver, name)

    def _fenced(self, call: Callable[[], R]) -> R:
        try:
            return call()
        except FencedOffError as refused:
            raise JobNotRunnableError(self.fence.job_uuid, str(refused)) from refused

    def ensure_registered(self, server_uuid: str, vm_uuid: str, *, ram_mib: int,
                          metadata: dict[str, object]) -> None:
        self._fenced(lambda: self.driver.ensure_registered(
            server_uuid, vm_uuid, ram_mib=ram_mib, metadata=metadata, fence=self.fence))

    def observe(self, server_uuid: str, vm_uuid: str) -> Incarnation | None:
        return self._fenced(lambda: self.driver.observe(server_uuid, vm_uuid, fence=self.fence))

    def ensure_state(self, server_uuid: str, vm_uuid: str, state: TargetState, *,
                     effect: str | None = None) -> Incarnation | None:
        return self._fenced(lambda: self.driver.ensure_state(
            server_uuid, vm_uuid, state, effect=effect, fence=self.fence))

    def unregister(self, server_uuid: str, vm_uuid: str) -> None:
        self._fenced(lambda: self.driver.unregister(server_uuid, vm_uuid, fence=self.fence))

    def raise_fence(self, server_uuid: str, vm_uuid: str) -> None:
        self._fenced(lambda: self.driver.raise_fence(server_uuid, vm_uuid, fence=self.fence))

    def reconfigure(self, server_uuid: str, vm_uuid: str, changes: dict[str, object]) -> None:
        self._fenced(lambda: self.driver.reconfigure(
            server_uuid, vm_uuid, changes, fence=self.fence))
