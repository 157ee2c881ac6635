"""A server an operator recorded as removed is removed for the job worker too
(service/jobs/compute/recorded_removals.py), except for ``raise_fence``, which its node may
still need (docs/jobs.md, "A quarantine while a job runs")."""

from __future__ import annotations

import pytest

from service.jobs.compute.driver import ComputeDriver, ComputeError, Fence, ServerInfo
from service.jobs.compute.recorded_removals import RecordedRemovalsRefused

KEPT, GONE = "server-kept", "server-gone"
FENCE = Fence("job", 7)


class RecordingDriver:
    """A driver that reports every server running and records what it was asked (and the
    fence an operation on a VM carried)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Fence | None]] = []

    def servers(self) -> list[ServerInfo]:
        return [self.server_info(KEPT), self.server_info(GONE)]

    def server_info(self, server_uuid: str) -> ServerInfo:
        return ServerInfo(uuid=server_uuid, hostname=server_uuid, boot_id="b", ram_mib=1024, cpus=2,
                          ram_allocated_mib=0)

    def inventory(self, server_uuid):
        self.calls.append(("inventory", server_uuid, None))
        return {}

    def ensure_registered(self, server_uuid, vm_uuid, *, ram_mib, metadata, fence=None):
        self.calls.append(("ensure_registered", server_uuid, fence))

    def observe(self, server_uuid, vm_uuid, *, fence=None):
        self.calls.append(("observe", server_uuid, fence))

    def ensure_state(self, server_uuid, vm_uuid, state, *, effect=None, fence=None):
        self.calls.append(("ensure_state", server_uuid, fence))

    def unregister(self, server_uuid, vm_uuid, *, fence=None):
        self.calls.append(("unregister", server_uuid, fence))

    def reconfigure(self, server_uuid, vm_uuid, changes, *, fence=None):
        self.calls.append(("reconfigure", server_uuid, fence))

    def raise_fence(self, server_uuid, vm_uuid, *, fence=None):
        self.calls.append(("raise_fence", server_uuid, fence))


def _operations(driver, server_uuid):
    """Each operation of the protocol; those on a VM carry ``FENCE``."""
    return {
        "inventory": lambda: driver.inventory(server_uuid),
        "ensure_registered": lambda: driver.ensure_registered(server_uuid, "vm", ram_mib=1,
                                                              metadata={}, fence=FENCE),
        "observe": lambda: driver.observe(server_uuid, "vm", fence=FENCE),
        "ensure_state": lambda: driver.ensure_state(server_uuid, "vm", "running", effect="j",
                                                    fence=FENCE),
        "unregister": lambda: driver.unregister(server_uuid, "vm", fence=FENCE),
        "reconfigure": lambda: driver.reconfigure(server_uuid, "vm", {"alias": "a"},
                                                  fence=FENCE),
    }


@pytest.fixture
def drivers():
    inner = RecordingDriver()
    recorded = {KEPT: "running", GONE: "removed"}
    return inner, RecordedRemovalsRefused(inner, recorded.get)


@pytest.mark.parametrize("operation", list(_operations(None, KEPT)))
def test_an_operation_on_a_server_recorded_removed_fails_without_reaching_it(
        drivers, operation) -> None:
    inner, refusing = drivers
    with pytest.raises(ComputeError, match=f"server {GONE} is removed"):
        _operations(refusing, GONE)[operation]()
    assert inner.calls == []


@pytest.mark.parametrize("operation", list(_operations(None, KEPT)))
def test_an_operation_on_another_server_reaches_the_driver_with_its_fence(
        drivers, operation) -> None:
    inner, refusing = drivers
    _operations(refusing, KEPT)[operation]()
    assert inner.calls == [(operation, KEPT, None if operation == "inventory" else FENCE)]


def test_the_servers_show_the_recorded_removal(drivers) -> None:
    _, refusing = drivers
    assert {s.uuid: s.status for s in refusing.servers()} == {KEPT: "running", GONE: "removed"}
    assert refusing.server_info(GONE).status == "removed"
    assert refusing.server_info(KEPT).status == "running"


def test_every_operation_of_the_protocol_on_a_vms_server_is_refused_and_tested() -> None:
    # A driver operation added without a refusal here would reach a removed server (tester A,
    # BUG 3: update and NIC jobs asked no node at all, so nothing refused them).
    asked = {name for name in vars(ComputeDriver) if not name.startswith("_")
             and callable(vars(ComputeDriver)[name])} - {"servers", "server_info"}
    assert asked == {*_operations(None, KEPT), "raise_fence"}
    assert asked <= set(vars(RecordedRemovalsRefused))


def test_a_fence_is_raised_on_a_server_recorded_removed_too(drivers) -> None:
    # it changes nothing there and only refuses more; the node may still take a call a
    # worker began before the removal
    inner, refusing = drivers
    refusing.raise_fence(GONE, "vm", fence=FENCE)
    assert inner.calls == [("raise_fence", GONE, FENCE)]
