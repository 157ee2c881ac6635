"""A body is JSON, sent as ``Content-Type: application/json`` (api.md, "Contract:
conventions"). Sent as anything else it is not read as JSON, and the refusal says so: it said
"Input should be a valid dictionary" of a body that was a JSON object (found by a tester,
with ``text/plain``, a form's type and ``curl -d``'s default). Still VMAPI's status (409 in
version 1: VMAPI's restify leaves such a body unread and refuses the request's missing
fields), and nothing is appended."""

from __future__ import annotations

import http.client
import json

import pytest

from tests.api.helpers import V2, assert_error, create_running_vm, vm_body

NOT_JSON_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                  "application/octet-stream", "application/xml"]


@pytest.mark.parametrize("content_type", NOT_JSON_TYPES)
def test_a_json_body_sent_as_another_type_is_refused_saying_so(client, services, content_type):
    head = services.commands.head_position()
    response = client.post("/vms", content=json.dumps(vm_body()).encode(),
                           headers={"content-type": content_type})
    body = assert_error(response, 409, "ValidationFailed")
    [error] = body["errors"]
    assert (error["field"], error["code"]) == ("body", "Invalid"), body
    assert "application/json" in error["message"] and content_type in error["message"], error
    assert "valid dictionary" not in response.text
    assert services.commands.head_position() == head
    v2 = client.post("/vms", content=json.dumps(vm_body()).encode(),
                     headers={"content-type": content_type, **V2})
    assert_error(v2, 422, "ValidationFailed")


def test_every_route_with_a_body_says_so(client, services):
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    for method, path in (("POST", f"/vms/{vm_uuid}?action=update"), ("POST", "/networks"),
                         ("POST", "/volumes"), ("POST", "/servers"), ("PUT", f"/vms/{vm_uuid}")):
        response = client.request(method, path, content=b'{"alias": "x"}',
                                  headers={"content-type": "text/plain"})
        body = assert_error(response, 409, "ValidationFailed")
        assert "application/json" in body["errors"][0]["message"], (path, body)
    assert services.commands.head_position() == head


def test_json_types_are_still_read(client):
    for content_type in ("application/json", "application/json; charset=utf-8",
                         "application/merge-patch+json", "APPLICATION/JSON"):
        response = client.post("/vms", content=json.dumps(vm_body()).encode(),
                               headers={"content-type": content_type})
        assert response.status_code == 202, (content_type, response.text)
    # a JSON body that is no object keeps its own message
    array = client.post("/vms", content=b"[]", headers={"content-type": "application/json"})
    assert "application/json" not in assert_error(array, 409, "ValidationFailed")["errors"][0][
        "message"]


def test_a_body_with_no_type_or_an_empty_one_is_read_as_json(client, services):
    # api.md: read as JSON when its type is JSON's "or none at all" (tester D, bug 2: FastAPI
    # 0.13x and later refuse an untyped body unless told not to be strict)
    vm_uuid = create_running_vm(client)
    for headers in ({}, {"content-type": ""}):
        created = client.post("/vms", content=json.dumps(vm_body()).encode(), headers=headers)
        assert created.status_code == 202, (headers, created.text)
        updated = client.post(f"/vms/{vm_uuid}?action=update", content=b'{"alias": "noct"}',
                              headers=headers)
        assert updated.status_code == 202, (headers, updated.text)


def test_a_body_with_no_type_is_read_as_json_over_a_real_connection(services):
    from tests.changes.live import live_server

    with live_server(services) as url:
        connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=30)
        try:
            for headers in ({}, {"Content-Type": ""}):
                # http.client sends no Content-Type of its own, only Content-Length
                connection.request("POST", "/vms", body=json.dumps(vm_body()).encode(),
                                   headers=headers)
                response = connection.getresponse()
                assert response.status == 202, (headers, response.read())
                response.read()
        finally:
            connection.close()
