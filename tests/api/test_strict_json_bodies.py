"""A body is UTF-8 JSON that gives each key once (api.md, "Versions"). Found by a tester:
``{"ram": 1, "ram": 2}`` was a 202 (the last value won) and ``{"action": "start", "action":
"stop"}`` stopped the VM; a body in UTF-16 or UTF-32 was applied (``json.loads`` of bytes
guesses the encoding), where the docs said bytes that are not UTF-8 are refused. Each is
``ValidationFailed`` naming the key or ``body``, and appends nothing."""

from __future__ import annotations

import json

import pytest

from tests.api.helpers import V2, assert_error, create_running_vm, error_fields, vm_body

JSON = {"content-type": "application/json"}


def _text(value: dict) -> str:
    return json.dumps(value)[1:-1]  # its members, to be repeated by hand


def test_a_key_given_twice_in_a_create_is_refused_naming_it(client, services):
    head = services.commands.head_position()
    content = ("{" + _text(vm_body()) + ', "ram": 512}').encode()
    body = assert_error(client.post("/vms", content=content, headers=JSON), 409,
                        "ValidationFailed")
    assert body["errors"] == [{"field": "ram", "code": "Invalid",
                               "message": "may be given only once"}], body
    assert_error(client.post("/vms", content=content, headers={**JSON, **V2}), 422,
                 "ValidationFailed")
    assert services.commands.head_position() == head


@pytest.mark.parametrize(("content", "field"), [
    (b'{"action": "start", "action": "stop"}', "action"),
    (b'{"action": "update", "tags": {"a": "x", "a": "y"}}', "tags.a"),
    (b'{"action": "update", "customer_metadata": {"k": "1"}, "alias": "a", "alias": "b"}',
     "alias"),
])
def test_a_key_given_twice_in_an_action_is_refused_naming_where(client, services, content,
                                                                   field):
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    body = assert_error(client.post(f"/vms/{vm_uuid}", content=content, headers=JSON), 409,
                        "ValidationFailed")
    assert error_fields(body) == {field: "Invalid"}, body
    assert services.commands.head_position() == head


def test_the_same_key_in_two_objects_is_no_repeat(client):
    vm_uuid = create_running_vm(client)
    content = b'{"customer_metadata": {"a": "1"}, "internal_metadata": {"a": "2"}}'
    response = client.post(f"/vms/{vm_uuid}?action=update", content=content, headers=JSON)
    assert response.status_code == 202, response.text


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32",
                                      "utf-32-le"])
def test_a_body_that_is_not_utf8_is_refused(client, services, encoding):
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    for method, path, value in (("POST", "/vms", vm_body()),
                                ("POST", f"/vms/{vm_uuid}?action=update", {"alias": "u16"}),
                                ("DELETE", f"/vms/{vm_uuid}", {"sync": True})):
        response = client.request(method, path, content=json.dumps(value).encode(encoding),
                                  headers=JSON)
        body = assert_error(response, 409, "ValidationFailed")
        assert body["errors"] == [{"field": "body", "code": "Invalid",
                                   "message": "not valid JSON (not UTF-8 text)"}], body
    assert services.commands.head_position() == head


def test_a_utf8_body_with_a_byte_order_mark_is_still_read(client):
    content = b"\xef\xbb\xbf" + json.dumps(vm_body(alias="bom")).encode()
    assert client.post("/vms", content=content, headers=JSON).status_code == 202


def test_malformed_json_keeps_its_message(client):
    body = assert_error(client.post("/vms", content=b'{"ram": }', headers=JSON), 409,
                        "ValidationFailed")
    assert body["errors"] == [{"field": "body", "code": "Invalid", "message":
                               "not valid JSON (Expecting value, at character 8)"}], body


def test_json_sent_elsewhere_gives_each_key_once_too(client, services):
    # the x-context header and a ListVms marker are JSON a client sends as a body is
    head = services.commands.head_position()
    context = assert_error(client.post("/vms", json=vm_body(),
                                       headers={"x-context": '{"a": {"b": 1, "b": 2}}'}),
                           409, "ValidationFailed")
    assert error_fields(context) == {"x-context": "Invalid"}, context
    assert "a.b: may be given only once" in context["errors"][0]["message"]
    assert services.commands.head_position() == head
    marker = '{"uuid": "930896af-bf8c-48d4-885c-6573a94b1853", "uuid": "x"}'
    listed = assert_error(client.get("/vms", params={"marker": marker}), 409,
                          "ValidationFailed")
    assert error_fields(listed) == {"marker": "Invalid"}, listed
    assert "uuid: may be given only once" in listed["errors"][0]["message"]


def test_a_changefeed_registration_giving_a_key_twice_is_refused():
    from service.changes.triton import RegistrationError, parse_registration

    with pytest.raises(RegistrationError, match="failed to parse"):
        parse_registration('{"instance": "a", "instance": "b", "changeKind": '
                           '{"resource": "vm", "subResources": ["alias"]}}')
