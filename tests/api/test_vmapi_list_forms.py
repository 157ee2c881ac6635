"""The list parameters VMAPI takes as an array or one comma-separated string, in the body or
the query (restify's mapParams maps both): ``remove_nics``' ``macs`` (sdc-vmapi
``validateMacs``, ``validStrings``), ``add_nics``' and CreateVm's ``networks``
(``validNetworks``). A tester found ``{"macs": "A,B"}`` refused ("Input should be a valid
list") and ``?macs=`` refused as an unknown parameter."""

from __future__ import annotations

import pytest

from tests.api.helpers import (
    assert_error,
    create_vm,
    error_fields,
    get_vm,
    vm_body,
    wait_job,
)
from tests.api.test_networks import make_network

# Nothing here needs PostgreSQL's own behaviour: the forms are read before anything is stored
pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def _vm_with_nics(client, count: int = 2) -> tuple[str, dict, list[str]]:
    network = make_network(client)
    created = create_vm(client, networks=[network["uuid"]] * count)
    assert wait_job(client, created["job_uuid"])["execution"] == "succeeded"
    vm_uuid = created["vm_uuid"]
    return vm_uuid, network, [nic["mac"] for nic in get_vm(client, vm_uuid)["nics"]]


def _remove(client, vm_uuid: str, body=None, **params):
    return client.post(f"/vms/{vm_uuid}", params={"action": "remove_nics", **params},
                       json=body)


def _removed_macs(client, response) -> list[str]:
    assert response.status_code == 202, response.text
    job = wait_job(client, response.json()["job_uuid"])
    assert job["execution"] == "succeeded", job
    return job["params"]["args"]["macs"]


def test_macs_as_one_comma_separated_string_in_the_body_removes_each(client) -> None:
    vm_uuid, _network, macs = _vm_with_nics(client)
    response = _remove(client, vm_uuid, {"macs": ",".join(macs)})
    assert _removed_macs(client, response) == macs
    assert get_vm(client, vm_uuid)["nics"] == []


def test_macs_in_the_query_alone_remove_each(client) -> None:
    vm_uuid, _network, macs = _vm_with_nics(client)
    response = _remove(client, vm_uuid, macs=",".join(macs))
    assert _removed_macs(client, response) == macs


def test_macs_in_the_query_and_the_same_in_the_body_are_one_request(client) -> None:
    vm_uuid, _network, macs = _vm_with_nics(client)
    response = _remove(client, vm_uuid, {"macs": [mac.upper() for mac in macs]},
                       macs=",".join(macs))
    assert _removed_macs(client, response) == macs


def test_different_macs_in_the_query_and_the_body_conflict(client, services) -> None:
    vm_uuid, _network, macs = _vm_with_nics(client)
    head = services.commands.head_position()
    body = assert_error(_remove(client, vm_uuid, {"macs": macs[:1]}, macs=macs[1]), 409,
                        "ConflictingParameters")
    assert body["message"] == "macs in the query and macs in the body differ"
    assert error_fields(body) == {"macs": "Invalid"}
    assert services.commands.head_position() == head


@pytest.mark.parametrize("macs", [5, True, {"a": "b"}, [1], ["02:00:00:00:00:01", None],
                                  [["02:00:00:00:00:01"]]])
def test_a_macs_of_another_shape_is_refused_in_vmapis_words(client, macs) -> None:
    vm_uuid, _network, _macs = _vm_with_nics(client, 1)
    body = assert_error(_remove(client, vm_uuid, {"macs": macs}), 409, "ValidationFailed")
    assert body["message"] == "Invalid VM update parameters"
    assert body["errors"] == [{"field": "macs", "code": "Invalid",
                               "message": "Invalid MAC addresses object"}]


@pytest.mark.parametrize("body", [None, {}, {"macs": None}, {"macs": ""}])
def test_no_macs_is_missing_as_vmapi_has_it(client, body) -> None:
    vm_uuid, _network, _macs = _vm_with_nics(client, 1)
    response = _remove(client, vm_uuid, body)
    refusal = assert_error(response, 409, "ValidationFailed")
    assert refusal["message"] == "Invalid VM update parameters"
    assert error_fields(refusal) == {"macs": "Missing"}


def test_an_empty_macs_in_the_query_is_missing_too(client) -> None:
    vm_uuid, _network, _macs = _vm_with_nics(client, 1)
    refusal = assert_error(_remove(client, vm_uuid, macs=""), 409, "ValidationFailed")
    assert error_fields(refusal) == {"macs": "Missing"}


def test_macs_in_the_query_of_add_nics_is_still_an_unknown_parameter(client) -> None:
    vm_uuid, network, macs = _vm_with_nics(client, 1)
    response = client.post(f"/vms/{vm_uuid}", params={"action": "add_nics", "macs": macs[0]},
                           json={"networks": [network["uuid"]]})
    refusal = assert_error(response, 409, "ValidationFailed")
    assert refusal["errors"] == [{"field": "macs", "code": "Invalid",
                                  "message": "Invalid parameter"}]


def test_networks_in_the_query_of_add_nics_add_a_nic_on_each(client) -> None:
    vm_uuid, network, _macs = _vm_with_nics(client, 1)
    response = client.post(f"/vms/{vm_uuid}", params={
        "action": "add_nics", "networks": f"{network['uuid']},external"})
    assert response.status_code == 202, response.text
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"
    assert len(get_vm(client, vm_uuid)["nics"]) == 3


def test_networks_in_the_query_of_a_create_are_the_vms_networks(client) -> None:
    network = make_network(client)
    response = client.post("/vms", params={"networks": network["uuid"]}, json=vm_body())
    assert response.status_code == 202, response.text
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"
    nics = get_vm(client, response.json()["vm_uuid"])["nics"]
    assert [nic["network_uuid"] for nic in nics] == [network["uuid"]]


def test_networks_in_the_query_and_the_same_list_in_the_body_are_one_request(client) -> None:
    network = make_network(client)
    response = client.post("/vms", params={"networks": network["uuid"]},
                           json=vm_body(networks=[network["uuid"]]))
    assert response.status_code == 202, response.text


def test_different_networks_in_the_query_and_the_body_conflict(client) -> None:
    network = make_network(client)
    response = client.post("/vms", params={"networks": network["uuid"]},
                           json=vm_body(networks=[network["uuid"], network["uuid"]]))
    body = assert_error(response, 409, "ConflictingParameters")
    assert body["message"] == "networks in the query and networks in the body differ"


def test_a_bad_networks_in_the_query_is_refused_as_the_bodys(client) -> None:
    response = client.post("/vms", params={"networks": "nope"}, json=vm_body())
    body = assert_error(response, 409, "ValidationFailed")
    assert body["message"] == "Invalid VM parameters"
    assert error_fields(body) == {"networks": "Invalid"}


def test_an_idempotency_key_takes_the_query_and_the_body_form_of_macs_as_one_request(
        client) -> None:
    vm_uuid, _network, macs = _vm_with_nics(client)
    key = {"Idempotency-Key": "remove-both"}
    first = client.post(f"/vms/{vm_uuid}", params={"action": "remove_nics",
                                                   "macs": ",".join(macs)}, headers=key)
    again = client.post(f"/vms/{vm_uuid}", params={"action": "remove_nics"},
                        json={"macs": macs}, headers=key)
    assert first.status_code == again.status_code == 202, again.text
    assert again.json()["job_uuid"] == first.json()["job_uuid"]
