"""A query parameter given twice is refused naming it, before any route reads it: which value
a route should take would be a guess (``action=stop&action=start`` queued a start, the last
one; found by a new user). VMAPI reads a repeated parameter as an array, which its validation
refuses or fails on."""

from __future__ import annotations

import pytest

from tests.api.helpers import V2, assert_error, create_running_vm, error_fields, get_vm


@pytest.mark.parametrize("headers, status", [({}, 409), (V2, 422)])
def test_a_command_with_its_action_twice_is_refused_and_appends_nothing(
        client, services, headers, status):
    vm = create_running_vm(client)
    head = services.commands.head_position()
    response = client.post(f"/vms/{vm}?action=stop&action=start", headers=headers)
    body = assert_error(response, status, "ValidationFailed")
    assert error_fields(body) == {"action": "Invalid"}
    assert "once" in body["errors"][0]["message"]
    assert services.commands.head_position() == head
    assert get_vm(client, vm)["state"] == "running"


@pytest.mark.parametrize("url, name", [
    ("/vms?limit=1&limit=2", "limit"),
    ("/vms?state=running&owner_uuid=930896af-bf8c-48d4-885c-6573a94b1853&state=stopped",
     "state"),
    ("/jobs?execution=queued&execution=failed", "execution"),
    ("/ping?consistency=strong&consistency=eventual", "consistency"),
])
def test_a_read_with_a_parameter_twice_is_refused_naming_it(client, url, name):
    body = assert_error(client.get(url), 409, "ValidationFailed")
    assert error_fields(body) == {name: "Invalid"}


@pytest.mark.parametrize("url, message", [
    ("/vms?limit=1&limit=2", "Invalid Parameters"),  # ListVms' own, VMAPI's word for word
    ("/vms?alias=a%00", "Invalid Parameters"),
    ("/vms?alias=a&foo=1", "Invalid Parameters"),  # the route's own refusal, for comparison
    ("/jobs?limit=1&limit=2", "Invalid Parameters"),
    ("/jobs?name=a%00", "Invalid Parameters"),
    ("/jobs?foo=1", "Invalid Parameters"),
])
def test_a_refusal_before_the_route_has_the_routes_top_level_message(client, url, message):
    """The URL's refusals (a parameter twice, a NUL) come before any route runs; their
    message is still the route's own (docs/vmapi-compatibility.md, "VMAPI's error texts"):
    ListVms' were "Invalid parameters", not VMAPI's "Invalid Parameters" (every route's
    now)."""
    assert assert_error(client.get(url), 409, "ValidationFailed")["message"] == message


def test_a_refusal_of_a_create_vms_url_has_the_default_message(client):
    # the same path as ListVms, another route: a refusal of its URL says the default
    for url in ("/vms?sync=true&sync=false", "/vms?sync=%00"):
        refused = client.post(url, json={})
        assert assert_error(refused, 409, "ValidationFailed")["message"] == "Invalid Parameters"


def test_distinct_parameters_and_one_list_valued_parameter_still_pass(client):
    vm = create_running_vm(client)
    assert client.get(f"/vms?uuids={vm},{vm}&limit=5").status_code == 200
    assert client.post(f"/vms/{vm}?action=stop&idempotent=true").status_code == 202


@pytest.mark.parametrize("url, name", [
    ("/changefeeds?foo=1", "foo"), ("/changefeeds/stats?foo=1", "foo"),
    ("/changefeeds?after=0", "after"),  # the upgrade's parameter: a plain GET takes none
])
def test_the_changefeeds_reads_refuse_an_unknown_parameter_by_name(client, url, name):
    # found by a tester: both answered 200, where every other route refuses it
    body = assert_error(client.get(url), 409, "ValidationFailed")
    assert error_fields(body) == {name: "Invalid"}
    assert_error(client.get(url, headers=V2), 422, "ValidationFailed")
    assert client.get(url.partition("?")[0]).status_code == 200


@pytest.mark.parametrize(("name", "values"), [
    ("If-Match", ['"1"', '"99"']),
    ("Idempotency-Key", ["a", "b"]),
    ("Authorization", ["Bearer one", "Bearer two"]),
    ("x-context", ['{"a": 1}', '{"a": 2}']),
])
def test_a_header_that_takes_one_value_given_twice_is_refused_naming_it(
        client, services, name, values):
    """Found by a tester: the second was silently ignored (a client's second If-Match, say,
    which it may have meant), where a query parameter given twice is refused."""
    vm = create_running_vm(client)
    head = services.commands.head_position()
    for version, status in (([], 409), (list(V2.items()), 422)):
        response = client.post(f"/vms/{vm}?action=stop",
                               headers=[*version, *((name, value) for value in values)])
        body = assert_error(response, status, "ValidationFailed")
        assert error_fields(body) == {name: "Invalid"}, body
        assert body["errors"][0]["message"] == "may be given only once"
    assert services.commands.head_position() == head
    assert get_vm(client, vm)["state"] == "running"
