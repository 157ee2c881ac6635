"""CreateVm's ``owner_uuid`` may be given in the query as in the body, as DeleteVm's and the
actions' (restify's mapParams): found by a tester, ``POST /vms?owner_uuid=`` was validated and
then silently ignored (the body's owner won, or ``Missing owner_uuid`` without one). An owner
token's scope holds for the query's form: tests/api/test_authorization.py."""

from __future__ import annotations

import pytest

from tests.api.helpers import (
    OTHER_OWNER,
    OWNER,
    assert_error,
    error_fields,
    get_vm,
    wait_job,
)

# Input refused (or read) before anything is stored: the backend adds nothing to what these
# check, so they run on SQLite alone (the default run's time: docs/operations.md)
pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

BODY = {"brand": "joyent", "ram": 256}


def test_an_owner_in_the_query_alone_is_the_vms_owner(client):
    response = client.post("/vms", params={"owner_uuid": OWNER}, json=BODY)
    assert response.status_code == 202, response.text
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"
    assert get_vm(client, response.json()["vm_uuid"])["owner_uuid"] == OWNER


def test_an_owner_in_the_query_alone_with_no_body_names_the_other_missing_fields(client):
    body = assert_error(client.post("/vms", params={"owner_uuid": OWNER}), 409,
                        "ValidationFailed")
    assert error_fields(body) == {"brand": "Missing", "ram": "Missing"}


def test_the_same_owner_in_the_query_and_the_body_is_one_request(client):
    response = client.post("/vms", params={"owner_uuid": OWNER},
                           json={**BODY, "owner_uuid": OWNER})
    assert response.status_code == 202, response.text
    assert get_vm(client, response.json()["vm_uuid"])["owner_uuid"] == OWNER


def test_different_owners_in_the_query_and_the_body_conflict_and_append_nothing(
        client, services):
    head = services.commands.head_position()
    response = client.post("/vms", params={"owner_uuid": OTHER_OWNER},
                           json={**BODY, "owner_uuid": OWNER})
    body = assert_error(response, 409, "ConflictingParameters")
    message = "owner_uuid in the query and owner_uuid in the body differ"
    assert body == {"code": "ConflictingParameters", "message": message, "errors": [
        {"field": "owner_uuid", "code": "Invalid", "message": message}]}
    assert services.commands.head_position() == head


def test_a_malformed_owner_in_the_query_is_refused_naming_it(client):
    response = client.post("/vms", params={"owner_uuid": "nope"},
                           json={**BODY, "owner_uuid": OWNER})
    assert error_fields(assert_error(response, 409, "ValidationFailed")) == {
        "owner_uuid": "Invalid"}



def test_if_match_on_create_vm_is_checked_for_its_syntax_only(client, services):
    # a VM being created has no version yet (api.md, "Contract: concurrency and idempotency")
    body = {**BODY, "owner_uuid": OWNER, "uuid": "4ad5ac1c-bb0b-4f34-9a85-2d7a5b3c8a10"}
    first = client.post("/vms", json=body, headers={"If-Match": '"7"'})
    assert first.status_code == 202, first.text
    # a repeat of a client-chosen uuid answers the first create, whatever If-Match says
    again = client.post("/vms", json=body, headers={"If-Match": '"999"'})
    assert again.status_code == 202, again.text
    assert again.json() == first.json()
    wait_job(client, first.json()["job_uuid"])  # its provision done: nothing else appends
    head = services.commands.head_position()
    for tag in ('"0"', "W/5", '"5'):
        refused = client.post("/vms", json={**BODY, "owner_uuid": OWNER},
                              headers={"If-Match": tag})
        assert error_fields(assert_error(refused, 409, "ValidationFailed")) == {
            "If-Match": "Invalid"}, tag
    assert services.commands.head_position() == head
