"""The ``Server`` aggregate: a repeated registration must describe the same node; a VM found
on it is recorded whatever its capacity."""

from __future__ import annotations

import uuid

import pytest

from domain.errors import ValidationError
from domain.server import Server
from tests.builders import cause


def registered() -> Server:
    return Server.register(server_uuid=uuid.uuid4(), hostname="cn1", boot_id="b1",
                           ram_mib=4096, cpus=4, cause=cause())


def test_a_server_described_as_registered_passes_the_check():
    registered().check_described_as(hostname="cn1", ram_mib=4096, cpus=4)


@pytest.mark.parametrize("changed", [{"hostname": "cn2"}, {"ram_mib": 1}, {"cpus": 1},
                                     {"hostname": "cn2", "cpus": 1}])
def test_another_description_is_a_duplicate_uuid_naming_what_differs(changed):
    asked = {"hostname": "cn1", "ram_mib": 4096, "cpus": 4, **changed}
    with pytest.raises(ValidationError) as refusal:
        registered().check_described_as(**asked)
    error = refusal.value.errors[0]
    assert (error["field"], error["code"]) == ("uuid", "Duplicate")
    assert all(name in error["message"] for name in changed)


def test_a_vm_found_on_a_server_is_recorded_past_its_capacity_and_status():
    server = registered()
    server.set_status("unknown", cause=cause())
    server.record_found("vm-1", ram_mib=8192, cpus=8, cause=cause())  # twice what it has
    assert (server.ram_allocated_mib, server.cpus_allocated) == (8192, 8)
    server.record_found("vm-1", ram_mib=1, cpus=1, cause=cause())  # a claim is kept as it is
    assert server.claims == {"vm-1": {"ram_mib": 8192, "cpus": 8}}
    assert [type(e).__name__ for e in server.collect_events()] == [
        "Registered", "StatusChanged", "Claimed"]
