"""Hostile or unusual input an operator's first hour produced (issue #17): stored headers are
bounded, unparseable bodies are the documented validation error naming the body, conflicting
parameters are refused, ``null`` clears a field, ``If-Match: *`` matches, refusals name what
was refused, and a 405 says which methods the path has."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from starlette.requests import Request

from service.api.headers import MAX_REQUEST_ID, MAX_X_CONTEXT_BYTES, stored_header
from service.api.errors import ApiError
from tests.api.helpers import (
    V2, act, act_and_wait, assert_error, create_running_vm, error_fields, get_vm, history_types,
    vm_body,
)
from tests.api.test_authorization import Authed, authed  # noqa: F401  (a fixture)


def _history(client: TestClient, vm_uuid: str) -> list[dict]:
    return client.get(f"/vms/{vm_uuid}/history").json()


def test_a_request_id_over_the_limit_is_replaced_and_never_stored(client: TestClient) -> None:
    vm = create_running_vm(client)
    for n, given in enumerate(("x" * (MAX_REQUEST_ID + 1), "x" * 10_000, "tab\there",
                               "é".encode())):
        response = act(client, vm, "update", headers={"x-request-id": given},
                       json={"alias": f"a{n}"})
        assert response.status_code == 202, response.text
        used = response.headers["x-request-id"]
        assert used != given and 0 < len(used) <= MAX_REQUEST_ID
        queued = [e for e in _history(client, vm) if e["cause"].get("request_id") == used]
        assert queued and all(len(e["cause"].get("request_id") or "") <= MAX_REQUEST_ID
                              for e in _history(client, vm))
    fitting = "r" * MAX_REQUEST_ID
    response = act(client, vm, "stop", headers={"x-request-id": fitting})
    assert response.headers["x-request-id"] == fitting
    assert any(e["cause"].get("request_id") == fitting for e in _history(client, vm))


def test_an_x_context_over_the_limit_is_refused_naming_it(client: TestClient) -> None:
    vm = create_running_vm(client)
    before = len(_history(client, vm))
    big = json.dumps({"caller": "x" * MAX_X_CONTEXT_BYTES})
    body = assert_error(act(client, vm, "stop", headers={"x-context": big}),
                        409, "ValidationFailed")
    assert error_fields(body) == {"x-context": "Invalid"}
    assert len(_history(client, vm)) == before


def test_stored_headers_are_read_as_utf_8_and_invalid_utf_8_is_refused_naming_them(
        client: TestClient) -> None:
    """HTTP carries header values as bytes; Starlette reads them as Latin-1, so an ``é`` sent
    in UTF-8 was stored as ``Ã©`` (found by a tester). The headers whose text is stored,
    ``x-context`` and ``Idempotency-Key``, are read as UTF-8."""
    vm = create_running_vm(client)
    context = {"caller": "café ☕"}
    job = act_and_wait(client, vm, "stop", headers={
        "x-context": json.dumps(context, ensure_ascii=False).encode(),
        "Idempotency-Key": "clé-1".encode()})
    assert job["params"]["context"] == context
    stopped = [e for e in _history(client, vm) if e["type"] == "JobQueued"][-1]
    assert stopped["cause"]["idempotency_key"] == "clé-1"



@pytest.mark.parametrize("name", ["x-context", "Idempotency-Key"])
def test_a_stored_header_that_is_not_utf_8_is_refused_naming_it(name: str) -> None:
    # the test client sends every header as UTF-8, so the raw bytes go in a request's scope
    raw = b'{"a": "caf\xe9"}'  # Latin-1's é: no UTF-8
    request = Request({"type": "http", "method": "POST", "path": "/vms", "query_string": b"",
                       "headers": [(name.lower().encode(), raw)]})
    with pytest.raises(ApiError) as refused:
        stored_header(request, name)
    assert refused.value.code == "ValidationFailed"
    assert refused.value.extra["errors"] == [
        {"field": name, "code": "Invalid", "message": "must be UTF-8 text"}]


def test_an_idempotency_key_of_over_255_characters_is_refused_by_every_command_taking_one(
        client: TestClient) -> None:
    vm = create_running_vm(client)
    before = history_types(client, vm)
    long_key = {"Idempotency-Key": "k" * 256}
    for method, url, body in (("POST", "/vms", vm_body()),
                              ("POST", f"/vms/{vm}?action=stop", None),
                              ("POST", f"/vms/{vm}?action=remove_nics",
                               {"macs": ["90:b8:d0:00:00:01"]}),
                              ("DELETE", f"/vms/{vm}", None)):
        refused = client.request(method, url, json=body, headers=long_key)
        assert error_fields(assert_error(refused, 409, "ValidationFailed")) == {
            "Idempotency-Key": "Invalid"}, url
    assert history_types(client, vm) == before  # nothing was appended


def test_malformed_and_too_deeply_nested_bodies_are_validation_errors_naming_the_body(
        client: TestClient) -> None:
    deep = json.dumps(vm_body())[:-1] + ', "customer_metadata": ' + '{"a": ' * 5000 + "1" \
        + "}" * 5000 + "}"
    for content in ('{"owner_uuid": x', deep, "[1, 2", '{"a": 1} trailing'):
        for headers, status in (({}, 409), (V2, 422)):
            response = client.post("/vms", content=content, headers={
                "content-type": "application/json", **headers})
            body = assert_error(response, status, "ValidationFailed")
            assert error_fields(body) == {"body": "Invalid"}, body
            assert "JSON" in body["errors"][0]["message"]
    assert client.get("/vms").json() == []


def test_a_body_that_is_not_utf8_is_refused_saying_so_not_as_nested_too_deeply(
        client: TestClient) -> None:
    content = json.dumps(vm_body()).encode()[:-1] + b', "alias": "\xff\xfe"}'
    for headers, status in (({}, 409), (V2, 422)):
        response = client.post("/vms", content=content, headers={
            "content-type": "application/json", **headers})
        body = assert_error(response, status, "ValidationFailed")
        assert error_fields(body) == {"body": "Invalid"}, body
        assert body["errors"][0]["message"] == "not valid JSON (not UTF-8 text)", body
    assert client.get("/vms").json() == []


@pytest.mark.parametrize("url", ["/vms/{vm}", "/console/fragments/vms/{vm}/state"])
def test_version_with_at_is_refused_as_conflicting_parameters(client: TestClient, url) -> None:
    # the console's fragment let version win (found by a new user); it folds as GetVm does
    vm = create_running_vm(client)
    for headers, status in (({}, 409), (V2, 422)):
        response = client.get(url.format(vm=vm),
                              params={"version": 1, "at": "2030-01-01T00:00:00Z"},
                              headers=headers)
        body = assert_error(response, status, "ConflictingParameters")
        assert error_fields(body) == {"at": "Invalid"}


def test_update_with_null_clears_the_alias_and_empties_metadata_and_tags(
        client: TestClient) -> None:
    vm = create_running_vm(client, alias="web0", tags={"role": "db"},
                           customer_metadata={"k": "v"})
    job = act_and_wait(client, vm, "update", json={"alias": None, "tags": None})
    assert job["execution"] == "succeeded", job
    after = get_vm(client, vm)
    assert (after["alias"], after["tags"], after["customer_metadata"]) == (None, {}, {"k": "v"})
    job = act_and_wait(client, vm, "update", json={"customer_metadata": None})
    assert get_vm(client, vm)["customer_metadata"] == {}
    # a field the body does not name is left as it is
    act_and_wait(client, vm, "update", json={"alias": "web1"})
    act_and_wait(client, vm, "update", json={"tags": {"a": "b"}})
    assert get_vm(client, vm)["alias"] == "web1"


def test_if_match_star_matches_any_current_version(client: TestClient) -> None:
    vm = create_running_vm(client)
    for action in ("stop", "start"):
        response = act(client, vm, action, headers={"If-Match": "*"})
        assert response.status_code == 202, response.text
    assert history_types(client, vm).count("JobQueued") == 3
    body = assert_error(act(client, vm, "stop", headers={"If-Match": "nope"}),
                        409, "ValidationFailed")
    assert error_fields(body) == {"If-Match": "Invalid"}
    response = client.post(f"/vms/{vm}", params={"action": "quarantine"},
                           json={"reason": "look"}, headers={"If-Match": "*"})
    assert response.status_code == 200, response.text
    assert_error(client.delete("/vms/2a0c9d28-1d47-4a0b-9b4b-1d1f0ad4a3b1",
                               headers={"If-Match": "*"}), 404, "ResourceNotFound")


def test_an_unknown_action_is_told_every_action_there_is(client: TestClient) -> None:
    vm = create_running_vm(client)
    body = assert_error(act(client, vm, "frobnicate"), 409, "ValidationFailed")
    message = body["errors"][0]["message"]
    for action in ("start", "stop", "kill", "reboot", "update", "quarantine", "release"):
        assert action in message, message


def test_an_owner_refused_quarantine_is_told_the_action(authed: Authed) -> None:
    created = authed.as_("owner", "POST", "/vms", json=vm_body()).json()
    for action in ("quarantine", "release"):
        response = authed.as_("owner", "POST", f"/vms/{created['vm_uuid']}",
                              params={"action": action}, json={"reason": "mine"})
        body = assert_error(response, 403, "Forbidden")
        assert f"?action={action}" in body["message"], body
    response = authed.as_("analyst", "POST", f"/vms/{created['vm_uuid']}",
                          params={"action": "stop"})
    assert assert_error(response, 403, "Forbidden")["message"] == (
        "role analyst may not POST /vms/{vm_uuid}")


def test_a_405_names_the_methods_the_path_has(client: TestClient) -> None:
    vm = create_running_vm(client)
    # Every GET route answers HEAD (service/api/head.py; HEAD /vms is a route of its own).
    # /openapi.json and /docs are paths the OpenAPI document leaves out
    for method, url, allowed in [("DELETE", "/vms", {"GET", "HEAD", "POST", "PUT"}),
                                 ("PATCH", f"/vms/{vm}", {"GET", "HEAD", "POST", "PUT",
                                                          "DELETE"}),
                                 ("POST", "/ping", {"GET", "HEAD"}),
                                 ("GET", "/sim/workers", {"POST"}),
                                 ("POST", "/openapi.json", {"GET", "HEAD"}),
                                 ("PUT", "/docs", {"GET", "HEAD"}),
                                 # the console's pages and assets (found by a new user: 404)
                                 ("POST", "/console", {"GET", "HEAD"}),
                                 ("DELETE", f"/console/vms/{vm}", {"GET", "HEAD"}),
                                 ("PUT", "/console/static/console.css", {"GET", "HEAD"})]:
        response = client.request(method, url)
        assert_error(response, 405, "BadMethod")
        assert set(response.headers["allow"].split(", ")) == allowed, (method, url)
        if "HEAD" in allowed:  # named because the path answers it
            assert client.head(url).status_code == 200, url
