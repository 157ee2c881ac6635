"""``PUT /vms/{uuid}`` as Triton's vm-agent sends it: the whole VM object, no generation
(service/commands/vm_agent.py; sdc-vmapi ``vms.delete_non_existing_no_workflow``)."""

from __future__ import annotations

import uuid

import pytest

from tests.api.helpers import (
    OWNER, V2, assert_error, create_running_vm, get_vm, history_types, wait_job,
)

T1, T2, T3 = "2026-01-01T00:00:01.000Z", "2026-01-01T00:00:02.000Z", "2026-01-01T00:00:03.000Z"


def put(client, vm_uuid: str, **fields):
    return client.put(f"/vms/{vm_uuid}", json={"uuid": vm_uuid, **fields})


def test_a_vm_the_log_never_had_is_recorded_as_found_even_on_no_server(client) -> None:
    vm_uuid = str(uuid.uuid4())
    response = put(client, vm_uuid, alias="found", state="running", owner_uuid=OWNER,
                   max_physical_memory=512, zone_state="running", quota=10)
    assert response.status_code == 200, response.text
    vm = response.json()
    assert (vm["state"], vm["server_uuid"], vm["alias"], vm["ram"]) == (
        "running", None, "found", 512)
    assert vm["queued_job_uuids"] == [] and vm["active_job_uuid"] is None
    assert history_types(client, vm_uuid) == ["Discovered"]
    assert client.get("/vms", params={"alias": "found"}).json()[0]["uuid"] == vm_uuid


def test_version_1_refuses_to_delete_a_running_vm_on_no_server_and_changes_nothing(
        client) -> None:
    vm_uuid = str(uuid.uuid4())
    assert put(client, vm_uuid, state="running").status_code == 200
    body = assert_error(client.delete(f"/vms/{vm_uuid}"), 409, "UnallocatedVM")
    assert body["message"] == "Cannot delete a VM with no server_uuid"
    assert get_vm(client, vm_uuid)["state"] == "running"
    # version 2 destroys it: there is no compute node to call
    deleted = client.delete(f"/vms/{vm_uuid}", headers=V2)
    assert deleted.status_code == 202, deleted.text
    assert wait_job(client, deleted.json()["job_uuid"])["execution"] == "succeeded"
    assert get_vm(client, vm_uuid)["state"] == "destroyed"


def test_reports_are_ordered_by_last_modified_so_a_stale_one_changes_nothing(client) -> None:
    vm_uuid = create_running_vm(client)
    server = get_vm(client, vm_uuid)["server_uuid"]
    stopped = put(client, vm_uuid, state="stopped", server_uuid=server, last_modified=T2)
    assert stopped.json()["state"] == "stopped"
    version = stopped.json()["version"]
    late = put(client, vm_uuid, state="running", server_uuid=server, last_modified=T1)
    assert late.status_code == 200
    assert (late.json()["state"], late.json()["version"]) == ("stopped", version)
    newer = put(client, vm_uuid, state="running", server_uuid=server, last_modified=T3)
    assert newer.json()["state"] == "running"


def test_a_destroyed_vm_is_never_brought_back(client) -> None:
    vm_uuid = create_running_vm(client)
    server = get_vm(client, vm_uuid)["server_uuid"]
    wait_job(client, client.delete(f"/vms/{vm_uuid}").json()["job_uuid"])
    again = put(client, vm_uuid, state="running", server_uuid=server, last_modified=T3)
    assert again.status_code == 200
    assert again.json()["state"] == "destroyed"


def test_a_report_from_another_server_does_not_move_the_vm(client) -> None:
    vm_uuid = create_running_vm(client)
    elsewhere = put(client, vm_uuid, state="stopped", server_uuid=str(uuid.uuid4()),
                    last_modified=T2)
    assert elsewhere.json()["state"] == "running"


def test_an_unknown_vm_reported_gone_or_a_mismatched_uuid_is_refused(client) -> None:
    assert_error(put(client, str(uuid.uuid4()), state="destroyed"), 404, "ResourceNotFound")
    mismatch = client.put(f"/vms/{uuid.uuid4()}", json={"uuid": str(uuid.uuid4()),
                                                       "state": "running"})
    assert_error(mismatch, 409, "ValidationFailed")
    assert_error(put(client, str(uuid.uuid4()), state="running", alias="a\x00b"), 409,
                 "ValidationFailed")


def test_a_report_folds_the_vms_stream_once_for_its_check_and_its_change(
        client, services, monkeypatch) -> None:
    # The check that a reporter may name the VM is made on the aggregate the report's own
    # change loaded, not on a fold of its own
    vm_uuid = create_running_vm(client)
    vm = get_vm(client, vm_uuid)
    folds: list[str] = []  # the VM as the loader hands it out: a fold, or a cached save's copy
    load, cached = services.commands.load_aggregate, services.commands._cached_save

    def loaded(kind, uuid, version=None):
        if str(uuid) == vm_uuid:
            folds.append(vm_uuid)
        return load(kind, uuid, version)

    def copied(uuid):
        copy = cached(uuid)
        if copy is not None and str(uuid) == vm_uuid:
            folds.append(vm_uuid)
        return copy

    monkeypatch.setattr(services.commands, "load_aggregate", loaded)
    monkeypatch.setattr(services.commands, "_cached_save", copied)
    generational = client.put(f"/vms/{vm_uuid}", json={
        "state": "running", "server_uuid": vm["server_uuid"], "boot_id": "b1",
        "generation": 1})
    assert generational.status_code == 200, generational.text
    assert len(folds) == 1
    folds.clear()
    # vm-agent's form first asks whether the log has the VM (a VM it has not is made new);
    # a report that changes something (one that changes nothing is decided again on the
    # log's fold, as every no-op decided on this process's cached save: docs/architecture.md)
    assert put(client, vm_uuid, state="stopped", server_uuid=vm["server_uuid"],
               last_modified=T1).status_code == 200
    assert len(folds) == 2


def test_a_generation_that_is_not_an_integer_is_refused_naming_it(client, services) -> None:
    # found by a new user: true was read as generation 1 (a 409 StaleGeneration)
    vm = get_vm(client, create_running_vm(client))
    head = services.commands.head_position()
    for generation in (True, "7", 7.5):
        refused = client.put(f"/vms/{vm['uuid']}", json={
            "state": "running", "server_uuid": vm["server_uuid"], "boot_id": "b1",
            "generation": generation})
        body = assert_error(refused, 409, "ValidationFailed")
        assert [e["field"] for e in body["errors"]] == ["generation"], body
        inventory = client.put(f"/vms?server_uuid={vm['server_uuid']}", json={
            "boot_id": "b1", "generation": generation, "vms": {}})
        assert_error(inventory, 409, "ValidationFailed")
    assert services.commands.head_position() == head


# Found by a tester: vm-agent's form stored what CreateVm refuses (an empty or 5,000-character
# tag key, 200 kB of metadata, ram 0 or 2**53-1), and an unknown state for an unknown uuid was
# 404 where the generation form said ValidationFailed. The agent's fields now have CreateVm's
# rules (service/api/schemas.py), checked before the VM is looked up.
REFUSED_FROM_AN_AGENT = [
    ("tags", {"": "x"}), ("tags", {"k" * 5000: "x"}), ("tags", {f"k{i}": 1 for i in range(129)}),
    ("tags", {"a": [1]}), ("customer_metadata", {"a": "x" * 200_000}),
    ("customer_metadata", {"": 1}), ("internal_metadata", {"k" * 129: "x"}),
    ("internal_metadata", {"a": "x" * 70_000}), ("ram", 0), ("ram", 9007199254740991),
    ("ram", 4 * 1024 * 1024 + 1), ("ram", "1024"), ("ram", True), ("ram", 512.5),
    ("max_physical_memory", 0), ("max_physical_memory", "512"), ("cpu_cap", 100_001),
    ("cpu_cap", -1), ("cpu_cap", "5"), ("cpu_cap", True), ("alias", ""), ("alias", "a b"),
    ("alias", "a" * 190), ("brand", "Joyent"), ("brand", ""), ("state", "bogus"),
    ("state", ""), ("owner_uuid", "nope"), ("image_uuid", "nope"),
]


def _refused_naming(response, field: str) -> None:
    # a value of none of a field's types is named where it is (tags.a)
    body = assert_error(response, 409, "ValidationFailed")
    assert [e["field"] for e in body["errors"]] in ([field], [f"{field}.a"]), body


@pytest.mark.parametrize(("field", "value"), REFUSED_FROM_AN_AGENT,
                         ids=[f"{f}-{str(v)[:20]}" for f, v in REFUSED_FROM_AN_AGENT])
def test_a_report_with_a_value_createvm_refuses_is_refused_naming_it_and_changes_nothing(
        client, services, field, value) -> None:
    known = get_vm(client, create_running_vm(client))
    head = services.commands.head_position()
    unknown = str(uuid.uuid4())
    for vm_uuid in (unknown, known["uuid"]):
        fields = {"state": "running", "server_uuid": known["server_uuid"], field: value}
        _refused_naming(put(client, vm_uuid, **fields), field)
    assert services.commands.head_position() == head
    assert client.get(f"/vms/{unknown}").status_code == 404
    assert get_vm(client, known["uuid"])["version"] == known["version"]


def test_an_unknown_state_is_refused_before_the_vm_is_looked_up_on_both_forms(client) -> None:
    server = str(uuid.uuid4())
    for vm_uuid in (str(uuid.uuid4()), create_running_vm(client)):
        vm_agent = put(client, vm_uuid, state="bogus", server_uuid=server)
        generational = client.put(f"/vms/{vm_uuid}", json={
            "state": "bogus", "server_uuid": server, "boot_id": "b1", "generation": 1})
        inventory = client.put(f"/vms?server_uuid={server}", json={
            "boot_id": "b1", "generation": 1, "vms": {vm_uuid: {"state": "bogus"}}})
        for response in (vm_agent, generational):
            _refused_naming(response, "state")
        _refused_naming(inventory, f"vms.{vm_uuid}.state")


def test_what_an_agent_may_report_that_createvm_refuses(client) -> None:
    # A VM found on a server is recorded as it is: a brand VMAPI does not create, a VMAPI state
    # vmledger does not model (left to the next report), no ram given (recorded as 0).
    found = put(client, str(uuid.uuid4()), state="running", brand="sngl", ram=4 * 1024 * 1024,
                cpu_cap=100_000, tags={"k" * 128: "v"}, customer_metadata={"a": "x" * 60_000})
    assert found.status_code == 200, found.text
    assert (found.json()["brand"], found.json()["ram"]) == ("sngl", 4 * 1024 * 1024)
    assert put(client, str(uuid.uuid4()), state="running").json()["ram"] == 0
    vm = get_vm(client, create_running_vm(client))
    stopping = put(client, vm["uuid"], state="stopping", server_uuid=vm["server_uuid"],
                   last_modified=T3)
    assert stopping.status_code == 200, stopping.text
    assert stopping.json()["state"] == "running"
    assert_error(put(client, str(uuid.uuid4()), state="stopping"), 404, "ResourceNotFound")


def _server(client, server_uuid: str) -> dict:
    return client.get(f"/servers/{server_uuid}").json()


@pytest.mark.parametrize(("state", "holds"), [("running", 1), ("stopped", 1), ("failed", 0)])
def test_a_vm_found_on_a_server_holds_its_capacity_there_as_a_placed_one_does(
        client, state, holds) -> None:
    before = client.get("/servers").json()[0]
    vm_uuid = str(uuid.uuid4())
    found = put(client, vm_uuid, state=state, server_uuid=before["uuid"], ram=1024,
                owner_uuid=OWNER)
    assert found.status_code == 200, found.text
    after = _server(client, before["uuid"])
    assert after["vm_count"] == before["vm_count"] + holds  # a failed VM holds none
    assert after["ram_allocated_mib"] == before["ram_allocated_mib"] + 1024 * holds
    # and gives it back when destroyed
    deleted = client.delete(f"/vms/{vm_uuid}", headers=V2)
    assert wait_job(client, deleted.json()["job_uuid"])["execution"] == "succeeded"
    assert _server(client, before["uuid"])["ram_allocated_mib"] == before["ram_allocated_mib"]


def test_a_vm_found_where_there_is_no_room_is_recorded_as_an_overcommit_placement_heeds(
        client) -> None:
    server = client.get("/servers").json()[0]
    vm_uuid = str(uuid.uuid4())
    ram = server["ram_free_mib"] + 512  # more than the server has free
    found = put(client, vm_uuid, state="running", server_uuid=server["uuid"], ram=ram,
                owner_uuid=OWNER)
    assert found.status_code == 200, found.text  # a fact the host reports is not refused
    after = _server(client, server["uuid"])
    assert after["ram_free_mib"] == -512
    # placement sees the server full: a VM pinned there fails to provision
    pinned = client.post("/vms", json={"owner_uuid": OWNER, "brand": "joyent", "ram": 128,
                                       "server_uuid": server["uuid"]})
    assert pinned.status_code == 202, pinned.text
    assert wait_job(client, pinned.json()["job_uuid"])["execution"] == "failed"
    assert "MiB free" in get_vm(client, pinned.json()["vm_uuid"])["error"]["message"]
