"""A server an operator recorded as removed is removed for the job worker too
(service/jobs/compute/recorded_removals.py)."""

from __future__ import annotations

import pytest

from service.jobs.compute.driver import ComputeError, ServerInfo
from service.jobs.compute.recorded_removals import RecordedRemovalsRefused

KEPT, GONE = "server-kept", "server-gone"


class RecordingDriver:
    """A driver that reports every server running and records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def servers(self) -> list[ServerInfo]:
        return [self.server_info(KEPT), self.server_info(GONE)]

    def server_info(self, server_uuid: str) -> ServerInfo:
        return ServerInfo(uuid=server_uuid, hostname=server_uuid, boot_id="b", ram_mib=1024, cpus=2,
                          ram_allocated_mib=0)

    def inventory(self, server_uuid):
        self.calls.append(("inventory", server_uuid))
        return {}

    def ensure_registered(self, server_uuid, vm_uuid, *, ram_mib, metadata):
        self.calls.append(("ensure_registered", server_uuid))

    def observe(self, server_uuid, vm_uuid):
        self.calls.append(("observe", server_uuid))

    def ensure_state(self, server_uuid, vm_uuid, state, *, effect=None):
        self.calls.append(("ensure_state", server_uuid))

    def unregister(self, server_uuid, vm_uuid):
        self.calls.append(("unregister", server_uuid))


def _operations(driver, server_uuid):
    return {
        "inventory": lambda: driver.inventory(server_uuid),
        "ensure_registered": lambda: driver.ensure_registered(server_uuid, "vm", ram_mib=1,
                                                              metadata={}),
        "observe": lambda: driver.observe(server_uuid, "vm"),
        "ensure_state": lambda: driver.ensure_state(server_uuid, "vm", "running", effect="j"),
        "unregister": lambda: driver.unregister(server_uuid, "vm"),
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
def test_an_operation_on_another_server_reaches_the_driver(drivers, operation) -> None:
    inner, refusing = drivers
    _operations(refusing, KEPT)[operation]()
    assert inner.calls == [(operation, KEPT)]


def test_the_servers_show_the_recorded_removal(drivers) -> None:
    _, refusing = drivers
    assert {s.uuid: s.status for s in refusing.servers()} == {KEPT: "running", GONE: "removed"}
    assert refusing.server_info(GONE).status == "removed"
    assert refusing.server_info(KEPT).status == "running"
