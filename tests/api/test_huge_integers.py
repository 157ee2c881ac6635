"""Integers a client writes with more digits than Python's ``int()`` reads (4,300) or a
magnitude no double holds (past about 1.8e308, which VMAPI's JSON.parse reads as Infinity) are
refused with a 4xx wherever a client's JSON or digits are read, and append nothing (found by a
tester: every body route answered a plain-text 500 for the first, and the second was stored
and echoed though non-finite numbers are refused)."""

from __future__ import annotations

import base64

import pytest

from service.changes.triton import RegistrationError, parse_registration
from tests.api.helpers import (
    OWNER,
    assert_error,
    create_running_vm,
    error_fields,
    get_vm,
    vm_body,
)

PAST_INT = "9" * 4301  # one digit past what int() reads
PAST_DOUBLE = "9" * 400  # int() reads it; no double holds it
JUST_PAST_DOUBLE = str(2**1024)  # the first integer that rounds to Infinity as a double
LARGEST_DOUBLE = str(int(1.7976931348623157e308))


def post_raw(client, method: str, path: str, text: str, **headers: str):
    return client.request(method, path, content=text.encode(),
                          headers={"content-type": "application/json", **headers})


def body_routes(vm_uuid: str, server_uuid: str, number: str) -> list[tuple[str, str, str]]:
    """(method, path, body) of every kind of body route, ``number`` somewhere in the body."""
    create = f'{{"owner_uuid": "{OWNER}", "brand": "joyent", "ram": 256'
    return [
        ("POST", "/vms", f'{{"owner_uuid": "{OWNER}", "brand": "joyent", "ram": {number}}}'),
        ("POST", "/vms", f'{create}, "customer_metadata": {{"a": {number}}}}}'),
        ("POST", f"/vms/{vm_uuid}?action=update", f'{{"tags": {{"a": {number}}}}}'),
        ("POST", f"/vms/{vm_uuid}?action=stop", f'{{"timeout": {number}}}'),
        ("DELETE", f"/vms/{vm_uuid}", f'{{"context": {{"a": {number}}}}}'),
        ("POST", "/networks", f'{{"name": {number}}}'),
        ("PUT", f"/vms/{vm_uuid}", (f'{{"state": "running", "server_uuid": "{server_uuid}", '
                                    f'"generation": {number}}}')),
        ("PUT", f"/vms?server_uuid={server_uuid}",
         f'{{"boot_id": "b", "generation": {number}, "vms": {{}}}}'),
        ("POST", "/volumes", f'{{"name": "v", "size": {number}}}'),
        ("POST", "/servers", f'{{"hostname": "h", "ram_mib": {number}}}'),
        ("POST", "/sim/faults", f'{{"a": {number}}}'),
        ("DELETE", "/sim/faults", f'{{"a": [{number}]}}'),
    ]


def test_an_integer_past_4300_digits_in_any_body_is_refused_naming_body(client, services):
    vm_uuid = create_running_vm(client)
    server_uuid = get_vm(client, vm_uuid)["server_uuid"]
    head = services.commands.head_position()
    for method, path, text in body_routes(vm_uuid, server_uuid, PAST_INT):
        body = assert_error(post_raw(client, method, path, text), 409, "ValidationFailed")
        assert error_fields(body) == {"body": "Invalid"}, (path, body)
        assert "more than 4300 digits" in body["errors"][0]["message"], body
    assert services.commands.head_position() == head
    assert get_vm(client, vm_uuid)["state"] == "running"


@pytest.mark.parametrize("number", [PAST_DOUBLE, JUST_PAST_DOUBLE, "-" + PAST_DOUBLE],
                         ids=["400 digits", "2**1024", "negative"])
def test_an_integer_past_any_double_in_a_body_is_refused_as_not_finite(
        client, services, number):
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    for method, path, text, field in [
        ("POST", "/vms", f'{{"owner_uuid": "{OWNER}", "brand": "joyent", "ram": {number}}}',
         "ram"),
        ("POST", "/vms", (f'{{"owner_uuid": "{OWNER}", "brand": "joyent", "ram": 256, '
                          f'"customer_metadata": {{"a": {number}}}}}'), "customer_metadata"),
        ("POST", f"/vms/{vm_uuid}?action=update", f'{{"tags": {{"a": {number}}}}}', "tags"),
        ("DELETE", f"/vms/{vm_uuid}", f'{{"context": {{"a": [{number}]}}}}', "context"),
    ]:
        body = assert_error(post_raw(client, method, path, text), 409, "ValidationFailed")
        assert list(error_fields(body)) == [field], (path, body)
        assert "numbers must be finite" in body["errors"][0]["message"], body
    assert services.commands.head_position() == head


def test_the_largest_double_is_still_a_number(client):
    vm_uuid = create_running_vm(client, customer_metadata={"a": int(LARGEST_DOUBLE)})
    assert get_vm(client, vm_uuid)["customer_metadata"] == {"a": int(LARGEST_DOUBLE)}


@pytest.mark.parametrize("number", [PAST_DOUBLE, "-" + JUST_PAST_DOUBLE])
def test_an_x_context_header_with_an_integer_past_any_double_is_refused(
        client, services, number):
    # a 4,301-digit integer is past the header's 4,096 bytes, refused as that
    head = services.commands.head_position()
    response = client.post("/vms", json=vm_body(), headers={"x-context": f'{{"a": {number}}}'})
    body = assert_error(response, 409, "ValidationFailed")
    assert error_fields(body) == {"x-context": "Invalid"}, body
    assert "numbers must be finite" in body["errors"][0]["message"], body
    assert services.commands.head_position() == head


@pytest.mark.parametrize("number", [PAST_INT, PAST_DOUBLE])
def test_a_marker_with_a_huge_integer_is_refused_naming_marker(client, number):
    vm_uuid = create_running_vm(client)
    vmapi = f'{{"uuid": "{vm_uuid}", "ram": {number}}}'
    ours = base64.urlsafe_b64encode(f'["ram.asc", {number}, "{vm_uuid}"]'.encode()).decode()
    for marker in (vmapi, ours.rstrip("=")):
        response = client.get("/vms", params={"sort": "ram", "marker": marker})
        body = assert_error(response, 409, "ValidationFailed")
        assert error_fields(body) == {"marker": "Invalid"}, body


@pytest.mark.parametrize("path_and_query, field", [
    ("/vms?limit={n}", "limit"), ("/vms?offset={n}", "offset"),
    ("/vms?cpu_cap={n}", "cpu_cap"), ("/vms?as_of={n}", "as_of"),
    ("/vms/{vm}?version={n}", "version"), ("/vms/{vm}/history?after_version={n}",
                                            "after_version"),
    ("/vms/{vm}/jobs?offset={n}", "offset"), ("/jobs?limit={n}", "limit"),
    ("/stats/stuck?older_than={n}", "older_than"), ("/changes?after={n}", "after"),
])
def test_a_query_integer_past_4300_digits_is_refused_naming_it(client, path_and_query, field):
    vm_uuid = create_running_vm(client)
    response = client.get(path_and_query.format(n=PAST_INT, vm=vm_uuid))
    body = assert_error(response, 409, "ValidationFailed")
    assert error_fields(body) == {field: "Invalid"}, body


def test_an_action_timeout_and_if_match_past_4300_digits_are_refused(client, services):
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    response = client.post(f"/vms/{vm_uuid}", params={"action": "stop", "timeout": PAST_INT})
    assert error_fields(assert_error(response, 409, "ValidationFailed")) == {
        "timeout": "Invalid"}
    for tag in (PAST_INT, f'"{PAST_INT}"'):
        response = client.post(f"/vms/{vm_uuid}", params={"action": "stop"},
                               headers={"If-Match": tag})
        assert error_fields(assert_error(response, 409, "ValidationFailed")) == {
            "If-Match": "Invalid"}
    assert services.commands.head_position() == head


@pytest.mark.parametrize("number", [PAST_INT, PAST_DOUBLE])
def test_a_changefeed_registration_with_a_huge_integer_is_refused(number):
    registration = (f'{{"instance": "i", "service": "t", "changeKind": {{"resource": "vm", '
                    f'"subResources": ["state"]}}, "x": {number}}}')
    with pytest.raises(RegistrationError):
        parse_registration(registration)


@pytest.mark.parametrize("fields, field", [
    ({"tags": {PAST_INT: "v"}}, "tags"),
    ({"customer_metadata": {PAST_INT: "v"}}, "customer_metadata"),
    ({"tags": {"triton.cns.services": f"web:{PAST_INT}"}}, "tags"),
    ({"tags": {"triton.cns.services": f"web:80:priority={PAST_INT}"}}, "tags"),
], ids=["tag key", "metadata key", "cns port", "cns priority"])
def test_digits_past_4300_in_keys_and_tag_values_are_refused_naming_the_field(
        client, fields, field):
    # VMAPI orders an object's keys as JavaScript does (array indices first, read as
    # integers) and parses a CNS port with parseInt: digits int() cannot read are refused
    # by the field's rules (a key's length, the tag's range) before either reads them
    response = client.post("/vms", json=vm_body(**fields))
    body = assert_error(response, 409, "ValidationFailed")
    assert list(error_fields(body)) == [field], body


def test_an_action_timeout_of_more_than_4300_digits_as_a_string_is_refused(client, services):
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    for headers in ({}, {"Idempotency-Key": "k1"}):
        response = client.post(f"/vms/{vm_uuid}", params={"action": "stop"},
                               json={"timeout": PAST_INT}, headers=headers)
        body = assert_error(response, 409, "ValidationFailed")
        assert list(error_fields(body)) == ["timeout"], body
    assert services.commands.head_position() == head


def test_a_last_event_id_past_4300_digits_is_refused_naming_it(client):
    response = client.get("/changes", headers={"Last-Event-ID": PAST_INT})
    body = assert_error(response, 409, "ValidationFailed")
    assert error_fields(body) == {"Last-Event-ID": "Invalid"}, body
