"""CreateVm reports every problem of its body at once, one ``errors`` entry each
(docs/vmapi-compatibility.md): found by a tester, a bad ``networks`` (checked once the rest
was valid) was left out of the other fields' errors, and told alone only once they were
fixed; so was a bad ``persistence`` (checked when the VM was recorded)."""

from __future__ import annotations

import pytest

from tests.api.helpers import OWNER, assert_error

# Input refused (or read) before anything is stored: the backend adds nothing to what these
# check, so they run on SQLite alone (the default run's time: docs/operations.md)
pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

BAD_FIELDS = {"alias": "-bad", "owner_uuid": "nope", "ram": "x", "brand": "bsd",
              "cpu_cap": -1, "image_uuid": "nope"}


def errors_of(response) -> dict[str, str]:
    body = assert_error(response, 409, "ValidationFailed")
    assert body["message"] == "Invalid VM parameters", body
    fields = [item["field"] for item in body["errors"]]
    assert len(fields) == len(set(fields)), body  # one entry a field
    return {item["field"]: item["message"] for item in body["errors"]}


@pytest.mark.parametrize("networks, message", [
    ("n", "network n not found"),
    (["nowhere"], "network nowhere not found"),
    ([{"uuid": "nope"}], "Invalid uuid nope"),
    ([{"primary": True}], "Network object must specify a UUID or a name"),
], ids=["a name as a string", "a name in a list", "a bad uuid", "no uuid nor name"])
def test_a_bad_networks_is_reported_with_every_other_bad_field(
        client, services, networks, message):
    head = services.commands.head_position()
    errors = errors_of(client.post("/vms", json={**BAD_FIELDS, "networks": networks}))
    assert set(errors) == {*BAD_FIELDS, "networks"}, errors
    assert errors["networks"] == message
    assert services.commands.head_position() == head


def test_networks_and_persistence_are_reported_with_each_other_and_a_missing_field(client):
    errors = errors_of(client.post("/vms", json={
        "owner_uuid": OWNER, "brand": "joyent", "networks": "n",
        "persistence": {"guest_crash": "explode"}}))
    assert errors == {"ram": "Field required", "networks": "network n not found",
                      "persistence": "guest_crash: unknown response 'explode'"}


def test_a_bad_persistence_alone_keeps_its_text(client):
    errors = errors_of(client.post("/vms", json={
        "owner_uuid": OWNER, "brand": "joyent", "ram": 128,
        "persistence": {"host_reboot": "restart", "lightning": "restart"}}))
    assert errors == {"persistence": "unknown happening 'lightning'"}
