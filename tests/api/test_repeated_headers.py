"""Every header the service reads that takes one value is refused when given twice, naming
it (api.md, "Versions"), as a query parameter given twice is. Found by a tester: two
``Accept-Version`` headers (``~2`` and ``7``) were served by the first, the second not even
validated; two ``Last-Event-ID`` on ``/changes`` and two ``Content-Type`` were resolved
silently; and ``/changes`` with a valid ``Authorization`` header and ``?token=nope`` was
answered 200, the token in the URL never checked."""

from __future__ import annotations

import json

import pytest

from tests.api.helpers import V2, assert_error, create_running_vm, error_fields, get_vm, vm_body


def test_two_accept_versions_are_refused_before_either_is_read(client, services):
    head = services.commands.head_position()
    for values in (["~2", "7"], ["~2", "~2"], ["7", "~1"]):
        response = client.post("/vms", json=vm_body(),
                               headers=[("Accept-Version", value) for value in values])
        body = assert_error(response, 409, "ValidationFailed")  # no version was negotiated
        assert body["errors"] == [{"field": "Accept-Version", "code": "Invalid",
                                   "message": "may be given only once"}], body
        assert "api-version" not in response.headers
    assert services.commands.head_position() == head


@pytest.mark.parametrize(("name", "values"), [
    ("Content-Type", ["application/json", "text/plain"]),
    ("Content-Type", ["application/json", "application/json"]),
])
def test_a_body_with_two_content_types_is_refused_naming_it(client, services, name, values):
    vm = create_running_vm(client)
    head = services.commands.head_position()
    for version, status in (([], 409), (list(V2.items()), 422)):
        response = client.post(f"/vms/{vm}?action=stop", content=b"{}",
                               headers=[*version, *((name, value) for value in values)])
        assert error_fields(assert_error(response, status, "ValidationFailed")) == {
            name: "Invalid"}
    created = client.post("/vms", content=json.dumps(vm_body()).encode(),
                          headers=[(name, value) for value in values])
    assert error_fields(assert_error(created, 409, "ValidationFailed")) == {name: "Invalid"}
    assert services.commands.head_position() == head
    assert get_vm(client, vm)["state"] == "running"


def test_two_last_event_ids_are_refused_naming_it(client):
    response = client.get("/changes", headers=[("Last-Event-ID", "1"), ("Last-Event-ID", "x")])
    body = assert_error(response, 409, "ValidationFailed")
    assert error_fields(body) == {"Last-Event-ID": "Invalid"}, body


def test_a_token_in_the_header_and_the_url_is_refused_naming_token(client):
    for token in ("nope", "the-same"):
        response = client.get(f"/changes?token={token}",
                              headers={"Authorization": f"Bearer {token}"})
        body = assert_error(response, 409, "ValidationFailed")
        assert error_fields(body) == {"token": "Invalid"}, body
        assert "Authorization" in body["errors"][0]["message"]
    # elsewhere ``token`` is an unknown parameter, refused as such
    other = client.get("/jobs?token=x", headers={"Authorization": "Bearer x"})
    assert assert_error(other, 409, "ValidationFailed")["errors"][0]["message"] == (
        "Invalid parameter")


def test_two_request_ids_are_replaced_by_a_generated_one(client):
    response = client.get("/ping", headers=[("x-request-id", "one"), ("x-request-id", "two")])
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] not in ("one", "two")
    single = client.get("/ping", headers={"x-request-id": "one"})
    assert single.headers["x-request-id"] == "one"


def test_two_user_agents_are_refused_naming_it(client):
    # read for curl's connection rule: which of two is the client's would be a guess
    response = client.get("/ping", headers=[("User-Agent", "curl/8.0"), ("User-Agent", "x")])
    assert error_fields(assert_error(response, 409, "ValidationFailed")) == {
        "User-Agent": "Invalid"}
