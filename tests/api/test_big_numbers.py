"""Numbers beyond what the database holds are refused up front, never a 500 and never a
poisoned read model (found by a new user's fuzzing: an agent report with a 2**64 generation
stopped every projection)."""

from __future__ import annotations

import json

import pytest

from projections.vm_markers import encode_marker
from tests.api.helpers import create_running_vm, get_vm

HUGE = str(2**64)


@pytest.mark.parametrize("path_and_query", [
    "/vms?offset=" + HUGE,
    "/jobs?offset=" + HUGE,
    "/volumes?offset=" + HUGE,
    "/stats/stuck?older_than=" + HUGE,
])
def test_a_huge_query_number_is_refused_naming_it(client, path_and_query):
    response = client.get(path_and_query)
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "ValidationFailed"


def test_huge_numbers_on_a_vms_routes_are_refused(client):
    vm_uuid = create_running_vm(client)
    for path in (f"/vms/{vm_uuid}/jobs?offset={HUGE}",
                 f"/vms/{vm_uuid}/history?after_version={HUGE}",
                 f"/vms/{vm_uuid}?version={HUGE}"):
        response = client.get(path)
        assert response.status_code == 409, (path, response.text)


def test_an_agent_report_with_a_huge_generation_is_refused_and_reads_go_on(client):
    vm_uuid = create_running_vm(client)
    vm = get_vm(client, vm_uuid)
    server = client.get(f"/servers/{vm['server_uuid']}").json()
    report = {"state": "stopped", "server_uuid": server["uuid"], "boot_id": server["boot_id"],
              "generation": 2**64}
    assert client.put(f"/vms/{vm_uuid}", json=report).status_code == 409
    inventory = {"boot_id": server["boot_id"], "generation": 10**23, "vms": {}}
    refused = client.put("/vms", params={"server_uuid": server["uuid"]}, json=inventory)
    assert refused.status_code == 409, refused.text
    assert get_vm(client, vm_uuid)["state"] == "running"  # a strong read still answers


@pytest.mark.parametrize("ram", [True, "1024.0", 1.5])
def test_ram_must_be_a_whole_number(client, ram):
    # a number's decimal text ("1024") is taken, as VMAPI takes it (test_create_vm_numbers)
    response = client.post("/vms", json={"owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853",
                                         "brand": "bhyve", "ram": ram})
    assert response.status_code == 409, response.text
    assert response.json()["errors"][0]["field"] == "ram"


def test_a_ram_filter_beyond_any_vms_memory_matches_none(client):
    # VMAPI takes any digits for ram (its regexp), so a huge one is no refusal: no VM has it
    create_running_vm(client)
    for method in ("GET", "HEAD"):
        response = client.request(method, "/vms", params={"ram": HUGE})
        assert response.status_code == 200, response.text
        assert response.headers["x-joyent-resource-count"] == "0"
    assert client.get("/vms", params={"ram": HUGE}).json() == []
    # past the 4,300 digits int() reads: was still a 500
    assert client.get("/vms", params={"ram": "9" * 5000}).json() == []


@pytest.mark.parametrize("path", ["/vms", "/console/fragments/fleet"])
def test_a_marker_with_a_huge_sort_value_is_refused_naming_marker(client, path):
    # found by a new user: a ram beyond SQLite's 64-bit integers in a marker answered 500
    vm_uuid = create_running_vm(client)
    markers = [json.dumps({"uuid": vm_uuid, "ram": int(HUGE)}),
               encode_marker("ram.asc", int(HUGE), vm_uuid),
               encode_marker("ram.desc", -int(HUGE), vm_uuid)]
    for marker, sort in zip(markers, ("ram", "ram", "ram.desc")):
        response = client.get(path, params={"sort": sort, "marker": marker})
        assert response.status_code == 409, (marker, response.text)
        assert [e["field"] for e in response.json()["errors"]] == ["marker"]
    assert get_vm(client, vm_uuid)["state"] == "running"
