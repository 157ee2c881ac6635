"""A body is read wherever one is sent (api.md, "Commands"): DeleteVm takes in its body what
the VMAPI client may send there as in its query, and refuses the rest; a route that takes no
body refuses one that is not empty. Found by a tester: ``DELETE /vms/{uuid}`` with
``-d '{not json'``, a ``text/plain`` body or ``{"sync": "yes", "bogus": 1}`` answered 202 and
queued a destroy job, and ``POST /sim/workers``, ``DELETE /sim/faults`` and the console's
audit run ignored a malformed body. Each refusal appends nothing."""

from __future__ import annotations

import pytest

from tests.api.helpers import OTHER_OWNER, V2, assert_error, create_running_vm, error_fields

MALFORMED = [
    ({"content-type": "text/plain"}, b"garbage", "body"),
    ({"content-type": "application/json"}, b"{not json", "body"),
    ({"content-type": "application/json"}, b"[1]", "body"),
]


@pytest.mark.parametrize(("headers", "content", "field"), MALFORMED)
def test_a_delete_with_a_malformed_body_is_refused_and_queues_nothing(
        client, services, headers, content, field):
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    response = client.request("DELETE", f"/vms/{vm_uuid}", content=content, headers=headers)
    assert error_fields(assert_error(response, 409, "ValidationFailed")) == {field: "Invalid"}
    v2 = client.request("DELETE", f"/vms/{vm_uuid}", content=content, headers={**headers, **V2})
    assert_error(v2, 422, "ValidationFailed")
    assert services.commands.head_position() == head


def test_a_delete_body_names_each_bad_or_unknown_field(client, services):
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    response = client.request("DELETE", f"/vms/{vm_uuid}", json={"sync": "yes", "bogus": 1})
    body = assert_error(response, 409, "ValidationFailed")
    assert error_fields(body) == {"sync": "Invalid", "bogus": "Invalid"}, body
    assert services.commands.head_position() == head


def test_a_delete_body_takes_what_vmapi_clients_send_in_the_query(client, services):
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    # another owner's VM is not found, whether owner_uuid is in the query or the body
    other = client.request("DELETE", f"/vms/{vm_uuid}", json={"owner_uuid": OTHER_OWNER})
    assert_error(other, 404, "ResourceNotFound")
    differing = client.request("DELETE", f"/vms/{vm_uuid}?sync=false", json={"sync": True})
    assert assert_error(differing, 409, "ConflictingParameters")["errors"][0]["field"] == "sync"
    assert services.commands.head_position() == head
    deleted = client.request("DELETE", f"/vms/{vm_uuid}", json={
        "sync": True, "origin": "cloudapi", "context": {"caller": "test"}})
    assert deleted.status_code == 202, deleted.text
    job = client.get(f"/jobs/{deleted.json()['job_uuid']}").json()
    assert job["execution"] == "succeeded", job  # sync: answered once the job ended
    assert job["params"]["context"] == {"caller": "test"}, job


def test_an_empty_delete_body_is_no_body(client):
    vm_uuid = create_running_vm(client)
    response = client.request("DELETE", f"/vms/{vm_uuid}", content=b"{}",
                              headers={"content-type": "application/json"})
    assert response.status_code == 202, response.text


ROUTES_WITHOUT_A_BODY = [("POST", "/sim/workers?action=resume"), ("DELETE", "/sim/faults"),
                         ("POST", "/console/fragments/audit?after=0&limit=1")]


@pytest.mark.parametrize(("method", "path"), ROUTES_WITHOUT_A_BODY)
def test_a_route_without_a_body_refuses_one_sent_to_it(client, method, path):
    for headers, content, field in [*MALFORMED, ({}, b'{"action": "pause"}', "action")]:
        response = client.request(method, path, content=content, headers=headers)
        body = assert_error(response, 409, "ValidationFailed")
        assert error_fields(body) == {field: "Invalid"}, (content, body)
    for headers, content in (({}, b""), ({"content-type": "application/json"}, b"{}"),
                             ({}, b"null")):
        assert client.request(method, path, content=content,
                              headers=headers).status_code == 200, (path, content)


def test_a_paused_fleet_is_not_resumed_by_a_refused_request(client):
    assert client.post("/sim/workers?action=pause").status_code == 200
    assert_error(client.post("/sim/workers?action=resume", content=b"{not json"), 409,
                 "ValidationFailed")
    assert client.get("/sim").json()["workers_paused"] is True
    client.post("/sim/workers?action=resume")
