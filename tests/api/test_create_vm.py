"""CreateVm: ``POST /vms`` (api.md, "Endpoints", "Errors", "VMAPI client compatibility")."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.api.helpers import (
    V2, assert_error, create_running_vm, create_vm, error_fields, event_types_after,
    get_vm, sim_row, vm_body, wait_job,
)


def test_create_answers_202_with_the_vm_and_job_and_the_vmapi_headers(client, services) -> None:
    response = client.post("/vms", json=vm_body(alias="web-1"))
    assert response.status_code == 202
    body = response.json()
    assert set(body) == {"vm_uuid", "job_uuid"}
    assert str(uuid.UUID(body["vm_uuid"])) == body["vm_uuid"]
    assert response.headers["Location"] == f"/vms/{body['vm_uuid']}"
    # Created and the provision's JobQueued: the VM is at version 2
    assert response.headers["ETag"] == '"2"'
    # the VMAPI client polls GET {workflow-api}/jobs/{uuid}
    job = client.get(f"{response.headers['workflow-api']}/jobs/{body['job_uuid']}")
    assert job.status_code == 200
    assert job.json()["name"] == "provision"
    assert job.json()["vm_uuid"] == body["vm_uuid"]


def test_a_created_vm_is_provisioned_and_runs_once_its_job_ends(client, services) -> None:
    created = create_vm(client, alias="db-1", ram=1024, cpu_cap=200, tags={"role": "db"},
                        customer_metadata={"user-script": "#!/bin/sh"},
                        image_uuid="2b683a82-a066-11e3-97ab-2faa44701c5a")
    job = wait_job(client, created["job_uuid"])
    assert job["execution"] == "succeeded"
    vm = get_vm(client, created["vm_uuid"])
    assert vm["state"] == "running"
    assert vm["server_uuid"] is not None
    assert (vm["alias"], vm["ram"], vm["cpu_cap"], vm["tags"]) == ("db-1", 1024, 200,
                                                                  {"role": "db"})
    assert vm["customer_metadata"] == {"user-script": "#!/bin/sh"}
    assert vm["image_uuid"] == "2b683a82-a066-11e3-97ab-2faa44701c5a"
    assert sim_row(services, created["vm_uuid"])["server_uuid"] == vm["server_uuid"]


@pytest.mark.parametrize(("headers", "status"), [({}, 409), (V2, 422)])
def test_missing_required_fields_are_refused_naming_each_one(
        client, services, headers, status) -> None:
    head = services.commands.head_position()
    response = client.post("/vms", json={"alias": "x"}, headers=headers)
    body = assert_error(response, status, "ValidationFailed")
    assert error_fields(body) == {"owner_uuid": "Missing", "brand": "Missing", "ram": "Missing"}
    assert all(item["message"] for item in body["errors"])
    assert services.commands.head_position() == head


def test_an_empty_body_is_refused_naming_the_required_fields(client) -> None:
    body = assert_error(client.post("/vms"), 409, "ValidationFailed")
    assert error_fields(body) == {"owner_uuid": "Missing", "brand": "Missing", "ram": "Missing"}


def test_an_unknown_body_field_is_refused_naming_it(client, services) -> None:
    head = services.commands.head_position()
    body = assert_error(client.post("/vms", json=vm_body(colour="blue")), 409, "ValidationFailed")
    assert error_fields(body) == {"colour": "Invalid"}
    assert services.commands.head_position() == head


OUT_OF_BOUNDS = [
    ("ram", 0),
    ("ram", -1),
    ("ram", "lots"),
    ("alias", "a" * 190),
    ("alias", "no spaces"),
    ("owner_uuid", "not-a-uuid"),
    ("brand", ""),
    ("customer_metadata", {f"k{i}": "v" for i in range(129)}),
    ("tags", {f"k{i}": i for i in range(129)}),
    ("persistence", "forever"),
    ("uuid", "12345"),
]


def test_every_field_out_of_bounds_is_refused_naming_it_and_appends_nothing(
        client, services) -> None:
    head = services.commands.head_position()
    for field, value in OUT_OF_BOUNDS:
        response = client.post("/vms", json=vm_body(**{field: value}), headers=V2)
        body = assert_error(response, 422, "ValidationFailed")
        assert error_fields(body) == {field: "Invalid"}, (field, value)
    assert services.commands.head_position() == head


@pytest.mark.parametrize("brand", ["nope", "joyent-minimal-2", "KVM"])
def test_a_brand_vmapi_does_not_create_is_refused_in_its_words_and_appends_nothing(
        client, services, brand) -> None:
    # found by a new user: any brand was created, then ListVms refused it as a filter
    head = services.commands.head_position()
    body = assert_error(client.post("/vms", json=vm_body(brand=brand)), 409, "ValidationFailed")
    assert body["message"] == "Invalid VM parameters"
    assert body["errors"] == [{"field": "brand", "code": "Invalid",
                               "message": "Must be one of: bhyve, joyent, joyent-minimal, kvm, "
                                          "lx"}]
    assert services.commands.head_position() == head


# (a metadata or tag value of no allowed type is VMAPI's one error, "Forbidden Data Type"
# naming it: tests/api/test_vmapi_metadata_forms.py)
@pytest.mark.parametrize("field, value, named", [
    ("networks", 5, "networks"),
    ("networks", [None], "networks.0"),
])
def test_a_value_of_no_allowed_type_is_one_error_naming_the_field_not_pydantics_union(
        client, field, value, named) -> None:
    # found by a new user: {"tags": {"a": {}}} answered four errors, tags.a.str, tags.a.int,
    # tags.a.float and tags.a.bool, and networks: 5 "networks.list[union[str,dict[str,any]]]"
    body = assert_error(client.post("/vms", json=vm_body(**{field: value})), 409,
                        "ValidationFailed")
    [error] = body["errors"]
    assert (error["field"], error["code"]) == (named, "Invalid"), body
    assert error["message"].startswith("Input should be a valid "), body
    assert " or a valid " in error["message"], body


@pytest.mark.parametrize("field, value", [
    ("customer_metadata", {"": "x"}),
    ("tags", {"k": float("inf")}),
    ("volumes", [{"volume_uuid": str(uuid.uuid4()), "mountpoint": "/a"}] * 2),
])
def test_a_refusal_of_our_own_rules_carries_no_pydantic_prefix(client, field, value) -> None:
    # found by a new user: "Value error, keys must be 1 to 128 characters"
    response = client.post("/vms", content=json.dumps(vm_body(**{field: value})),
                           headers={"content-type": "application/json"})
    body = assert_error(response, 409, "ValidationFailed")
    assert body["errors"], body
    assert all(not e["message"].startswith("Value error") for e in body["errors"]), body


def test_a_body_that_is_not_json_is_refused(client, services) -> None:
    head = services.commands.head_position()
    response = client.post("/vms", content=b"{not json",
                           headers={"content-type": "application/json"})
    assert_error(response, 409, "ValidationFailed")
    assert services.commands.head_position() == head


def test_a_client_chosen_uuid_names_the_vm(client) -> None:
    chosen = str(uuid.uuid4())
    created = create_vm(client, uuid=chosen)
    assert created["vm_uuid"] == chosen
    assert get_vm(client, chosen)["uuid"] == chosen


def test_creating_the_same_uuid_again_with_the_same_request_returns_the_first_result(
        paused, services) -> None:
    chosen = str(uuid.uuid4())
    first = create_vm(paused.http, uuid=chosen, alias="twin")
    head = services.commands.head_position()
    again = create_vm(paused.http, uuid=chosen, alias="twin")
    assert again == first
    assert services.commands.head_position() == head


@pytest.mark.parametrize(("headers", "status"), [({}, 409), (V2, 422)])
def test_creating_an_existing_uuid_with_another_request_is_a_duplicate_validation_error(
        paused, services, headers, status) -> None:
    chosen = str(uuid.uuid4())
    create_vm(paused.http, uuid=chosen, alias="first")
    head = services.commands.head_position()
    response = paused.http.post("/vms", json=vm_body(uuid=chosen, alias="second"), headers=headers)
    body = assert_error(response, status, "ValidationFailed")
    assert error_fields(body) == {"uuid": "Duplicate"}
    assert services.commands.head_position() == head


def test_a_vm_pinned_to_a_server_is_placed_on_it(client, services) -> None:
    servers = [server.uuid for server in services.fleet.servers()]
    for pinned in servers[1:3]:
        vm_uuid = create_running_vm(client, server_uuid=pinned, persistence="ephemeral")
        vm = get_vm(client, vm_uuid)
        assert (vm["server_uuid"], vm["persistence"]) == (pinned, "ephemeral")
        assert sim_row(services, vm_uuid)["server_uuid"] == pinned



def test_a_vm_pinned_to_a_server_that_cannot_take_it_fails_naming_that_server(
        client, services) -> None:
    # tester A, observation 8: a pin to a server no one registered failed with "no server has
    # 256 MiB and 1 CPUs free", as if the fleet were full
    unknown = str(uuid.uuid4())
    created = create_vm(client, server_uuid=unknown)
    job = wait_job(client, created["job_uuid"])
    assert job["execution"] == "failed"
    assert job["chain_results"][-1]["error"] == f"server {unknown} is unknown"
    assert get_vm(client, created["vm_uuid"])["state"] == "failed"
    small = services.fleet.servers()[0]
    created = create_vm(client, server_uuid=small.uuid, ram=small.ram_mib + 1)
    job = wait_job(client, created["job_uuid"])
    assert job["chain_results"][-1]["error"].startswith(f"server {small.uuid}: ")

def test_force_provision_failure_makes_the_provision_job_fail_and_the_vm_failed(
        client, services) -> None:
    created = create_vm(client, internal_metadata={"force_provision_failure": True})
    job = wait_job(client, created["job_uuid"])
    assert job["execution"] == "failed"
    assert job["error"]
    assert job["chain_results"][-1]["error"]
    vm = get_vm(client, created["vm_uuid"])
    assert vm["state"] == "failed"
    assert vm["error"]["reason"] == "provision_failed"
    assert vm["server_uuid"] is None
    assert sim_row(services, created["vm_uuid"]) is None


def test_force_provision_failure_as_the_string_true_is_honoured_too(client) -> None:
    created = create_vm(client, internal_metadata={"force_provision_failure": "true"})
    assert wait_job(client, created["job_uuid"])["execution"] == "failed"


def test_sync_create_answers_once_the_provision_has_ended(client, services) -> None:
    # every simulated operation takes a while: an answer before the job's end would show it
    assert client.put("/sim/latency", json={"seconds": 0.05}).status_code == 200
    response = client.post("/vms", json=vm_body(), params={"sync": "true"})
    assert response.status_code == 202
    job = services.jobs.get(response.json()["job_uuid"])
    assert job["execution"] == "succeeded"


@pytest.mark.parametrize("value", ["1", "TRUE"])
def test_sync_create_reads_sync_as_the_actions_do(client, services, value) -> None:
    # it read only "true": sync=1 answered before the provision ended (found by a tester)
    assert client.put("/sim/latency", json={"seconds": 0.05}).status_code == 200
    response = client.post("/vms", json=vm_body(), params={"sync": value})
    assert response.status_code == 202
    assert services.jobs.get(response.json()["job_uuid"])["execution"] == "succeeded"


@pytest.mark.parametrize("value", ["yes", "", "2"])
def test_a_create_whose_sync_is_no_boolean_is_refused_naming_it(client, services,
                                                                 value) -> None:
    # VMAPI createVm refuses it too; it was taken as false, and the VM created
    head = services.commands.head_position()
    body = assert_error(client.post("/vms", json=vm_body(), params={"sync": value}), 409,
                        "ValidationFailed")
    assert error_fields(body) == {"sync": "Invalid"}, body
    assert services.commands.head_position() == head


def test_create_appends_created_then_the_provision_jobs_queued_event(paused, services) -> None:
    head = services.commands.head_position()
    created = create_vm(paused.http)
    assert event_types_after(services, head) == ["Created", "JobQueued"]
    vm = get_vm(paused.http, created["vm_uuid"])
    assert vm["state"] == "provisioning"
    assert vm["queued_job_uuids"] == [created["job_uuid"]]


@pytest.mark.parametrize("persistence", [
    {"preset": "persistent", "guest_crash": "destroy"},
    {"host_reboot": "stay_stopped"},  # rows alone: the rest as the default preset
    {"preset": "ephemeral", "guest_shutdown": "stay_stopped", "agent_forgot": "quarantine"},
])
def test_a_persistence_policy_set_row_by_row_is_taken_and_shown(client, persistence) -> None:
    created = create_vm(client, persistence=persistence, headers=V2)
    assert get_vm(client, created["vm_uuid"])["persistence"] == persistence


@pytest.mark.parametrize("persistence, message", [
    ("persistant", "Input should be 'persistent' or 'ephemeral'"),
    ({"preset": "nope"}, "unknown preset 'nope'; one of persistent, ephemeral"),
    ({"cosmic_ray": "restart"}, "unknown happening 'cosmic_ray'"),
    ({"guest_crash": "explode"}, "guest_crash: unknown response 'explode'"),
    ({"guest_shutdown": "restart"},
     "guest_shutdown: restart is not carried out for it; one of stay_stopped, destroy"),
    ({"agent_forgot": "restart"},
     "agent_forgot: restart is not carried out for it; one of quarantine"),
    ({"guest_crash": 5}, "Input should be a valid string"),
])
def test_a_persistence_policy_vmapi_cannot_carry_out_is_refused_naming_it_and_appends_nothing(
        client, services, persistence, message) -> None:
    head = services.commands.head_position()
    body = assert_error(client.post("/vms", json=vm_body(persistence=persistence), headers=V2),
                        422, "ValidationFailed")
    [error] = body["errors"]
    assert error["field"].split(".")[0] == "persistence", body
    assert error["message"].startswith(message), body
    assert services.commands.head_position() == head
