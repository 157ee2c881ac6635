"""Instants in query parameters that no UTC datetime holds: a date at the edge of the
calendar whose offset carries it past year 1 or year 9999 in UTC. Each query parameter that
reads an instant refuses them as it refuses any malformed one (409 ``ValidationFailed``),
where converting them to UTC raised ``OverflowError`` (a plain-text 500)."""

from __future__ import annotations

import json

import pytest

from projections.vm_markers import encode_marker
from tests.api.helpers import create_running_vm

# Year 1 at +01:00 is year 0 in UTC; year 9999 at -01:00 is year 10000.
BEYOND_UTC = ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00")
SOME_UUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"


def _refused(response, field: str, message: str | None = None) -> None:
    assert response.status_code == 409, response.text
    body = response.json()
    assert body["code"] == "ValidationFailed", body
    assert [e["field"] for e in body["errors"]] == [field], body
    if message is not None:
        assert body["errors"][0]["message"] == message, body


@pytest.mark.parametrize("stamp", BEYOND_UTC)
def test_list_vms_create_timestamp_beyond_utc_is_an_invalid_timestamp(client, stamp) -> None:
    response = client.get("/vms", params={"create_timestamp": stamp})
    _refused(response, "create_timestamp", f"Invalid timestamp: {stamp}")
    assert response.json()["message"] == "Invalid Parameters"
    head = client.head("/vms", params={"create_timestamp": stamp})
    assert head.status_code == 409 and head.content == b""


@pytest.mark.parametrize("stamp", BEYOND_UTC)
def test_a_vmapi_marker_with_a_timestamp_beyond_utc_is_an_invalid_marker(client, stamp) -> None:
    marker = json.dumps({"uuid": SOME_UUID, "create_timestamp": stamp})
    response = client.get("/vms", params={"sort": "create_timestamp.asc", "marker": marker})
    _refused(response, "marker", f"Invalid marker: {marker}. "
                                 f"Marker has an invalid create_timestamp field: {stamp}")


@pytest.mark.parametrize("stamp", BEYOND_UTC)
def test_our_marker_with_a_timestamp_beyond_utc_is_an_invalid_marker(client, stamp) -> None:
    marker = encode_marker("create_timestamp.asc", stamp, SOME_UUID)
    response = client.get("/vms", params={"sort": "create_timestamp.asc", "marker": marker})
    _refused(response, "marker")


@pytest.mark.parametrize("stamp", BEYOND_UTC)
def test_time_travel_at_an_instant_beyond_utc_is_refused_naming_at(client, stamp) -> None:
    vm_uuid = create_running_vm(client)
    for path in (f"/vms/{vm_uuid}", f"/console/fragments/vms/{vm_uuid}/state"):
        _refused(client.get(path, params={"at": stamp}), "at")
    # the same instants written in UTC's own range are served
    assert client.get(f"/vms/{vm_uuid}", params={"at": "0001-01-01T00:00:00Z"}).status_code == 404
    assert client.get(f"/vms/{vm_uuid}", params={"at": "9999-12-31T23:59:59Z"}).status_code == 200
