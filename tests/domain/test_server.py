"""The ``Server`` aggregate's registration rule: a repeat must describe the same node."""

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
