"""HEAD on every GET route but the stream of changes: the GET's status and headers, no body
(RFC 9110, 9.3.2; VMAPI's HeadVm; docs/api.md, "Conventions")."""

from __future__ import annotations

import uuid

from fastapi.testclient import TestClient

from tests.api.helpers import assert_error, create_running_vm

_SAME_HEADERS = ("etag", "content-type", "content-length", "x-joyent-resource-count")


def test_head_of_a_vm_answers_the_gets_status_and_headers_with_no_body(client) -> None:
    vm_uuid = create_running_vm(client)
    got = client.get(f"/vms/{vm_uuid}")
    head = client.head(f"/vms/{vm_uuid}")
    assert (head.status_code, head.content) == (200, b"")
    assert {name: head.headers.get(name) for name in _SAME_HEADERS} == {
        name: got.headers.get(name) for name in _SAME_HEADERS}
    assert head.headers["etag"] == f'"{got.json()["version"]}"'


def test_head_of_each_read_route_answers_as_its_get(client) -> None:
    vm_uuid = create_running_vm(client)
    job_uuid = client.get("/jobs", params={"vm_uuid": vm_uuid}).json()[0]["uuid"]
    for url in ("/ping", f"/vms/{vm_uuid}/history", f"/vms/{vm_uuid}/jobs", "/jobs",
                f"/jobs/{job_uuid}", "/servers", "/volumes", "/networks", "/changefeeds"):
        got, head = client.get(url), client.head(url)
        assert (head.status_code, head.content) == (got.status_code, b""), url
        assert head.headers.get("content-length") == got.headers.get("content-length"), url


def test_head_refuses_as_its_get_refuses(client) -> None:
    missing = str(uuid.uuid4())
    assert_error(client.get(f"/vms/{missing}"), 404, "ResourceNotFound")
    head = client.head(f"/vms/{missing}")
    assert (head.status_code, head.content) == (404, b"")
    bad = client.head("/vms/not-a-uuid")
    assert bad.status_code == client.get("/vms/not-a-uuid").status_code != 200


def test_the_stream_of_changes_has_no_head_and_a_405_names_head_where_get_is(
        client: TestClient) -> None:
    vm_uuid = create_running_vm(client)
    # not through the schema check: a 405 is not an operation's answer, and HEAD /changes
    # would be taken for GET /changes
    response = TestClient(client.app).head("/changes")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET"
    allow = client.request("PATCH", f"/vms/{vm_uuid}/history").headers["allow"]
    assert allow == "GET, HEAD"


def test_a_head_is_logged_with_its_method_and_the_gets_route(client, json_logs) -> None:
    vm_uuid = create_running_vm(client)
    assert client.head(f"/vms/{vm_uuid}").status_code == 200
    [closing] = [line for line in json_logs()
                 if line["logger"] == "vmledger.access" and line["method"] == "HEAD"]
    assert (closing["method"], closing["route"], closing["status"]) == (
        "HEAD", "/vms/{vm_uuid}", 200)


def test_count_vms_answers_the_count_alone_as_documented(client) -> None:
    # a tester found api.md saying both "the GET's Content-Length" and "only the count": HEAD
    # /vms is CountVms, which reads no page, so its length is 0, as VMAPI's (whose own tests
    # require a Content-Length on it); its other headers are the GET's
    create_running_vm(client)
    got, head = client.get("/vms"), client.head("/vms")
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-length"] == "0" != got.headers["content-length"]
    for name in ("x-joyent-resource-count", "connection", "api-version"):
        assert head.headers[name] == got.headers[name], name
