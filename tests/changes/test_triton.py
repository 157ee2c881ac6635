"""Triton's changefeed protocol at /changefeeds (service/changes/triton.py), spoken by a
WebSocket client as the npm Listener speaks it; .ci/changefeed.sh runs the real Listener."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from websockets.exceptions import ConnectionClosedError
from websockets.sync.client import connect

from projections.formats import epoch_ms
from service.changes.triton import RegistrationError, parse_registration
from tests.changes.live import live_server, refused_upgrade
from tests.changes.scenarios import OWNER_A, create_vm
from tests.waiting import wait_until

V1 = {"instance": "6f0f3b8e-0d5e-4d0b-9c5e-6d1f7a9b2c01", "service": "test",
      "changeKind": {"resource": "vm", "subResources": ["state", "destroyed"]}}


def _ws(url: str) -> str:
    return url.replace("http://", "ws://") + "/changefeeds"


def _changes_of(ws, vm_uuid: str, count: int) -> list[dict]:
    found = []
    while len(found) < count:
        message = json.loads(ws.recv(timeout=20))
        if message["changedResourceId"] == vm_uuid:
            found.append(message)
    return found


def test_resources_and_v1_bootstrap_then_the_changes_of_registered_sub_resources(services):
    with live_server(services) as url:
        assert httpx.get(url + "/changefeeds").json()["vm"]["bootstrapRoute"] == "/vms"
        with connect(_ws(url)) as ws:
            ws.send(json.dumps(V1))
            bootstrap = json.loads(ws.recv(timeout=10))
            assert bootstrap["resource"] == "vm" and bootstrap["bootstrapRoute"] == "/vms"
            assert "state" in bootstrap["subResources"]
            stats = httpx.get(url + "/changefeeds/stats").json()
            assert stats["listeners"] == 1
            vm_uuid = create_vm(services, OWNER_A)
            [created] = _changes_of(ws, vm_uuid, 1)
            assert created["changeKind"] == {"resource": "vm",
                                             "subResources": ["alias", "owner_uuid", "state"]}
            assert created["position"] > 0 and created["published"].isdigit()


def test_v2_registration_gets_bootstrap_routes(services):
    v2 = {"instance": "i", "service": "t", "resources": [
        {"resource": "vm", "subResources": ["state"]}]}
    with live_server(services) as url, connect(_ws(url)) as ws:
        ws.send(json.dumps(v2))
        assert json.loads(ws.recv(timeout=10))["bootstrapRoutes"][0]["resource"] == "vm"


@pytest.mark.parametrize("registration, reason", [
    ("not json", "failed to parse"),
    (json.dumps({"changeKind": V1["changeKind"]}), '"instance"'),
    (json.dumps({**V1, "changeKind": {"resource": "nic", "subResources": []}}),
     "unknown resource: nic"),
    # the registration's own "after" is held to the URL's range: 2**64 waited forever, true
    # was taken as position 1
    (json.dumps({**V1, "after": 2**64}), '"after" should be a log position'),
    (json.dumps({**V1, "after": True}), '"after" should be a log position'),
    # found by a tester: a binary frame raised KeyError: 'text' in the route (close 1006);
    # the protocol's registration is a text message, as the Listener sends it
    (b"\x00\x01", "should be a text message"),
    (json.dumps(V1).encode(), "should be a text message"),
    # found by a tester: a misspelt or empty list of sub-resources was taken, and the
    # listener, counted as registered, never received a change
    (json.dumps({**V1, "changeKind": {"resource": "vm", "subResources": ["state", "bogus"]}}),
     "unknown sub-resource of vm: bogus"),
    (json.dumps({**V1, "changeKind": {"resource": "vm", "subResources": []}}),
     '"subResources" should name at least one of vm\'s: alias, '),
    (json.dumps({**V1, "changeKind": {"resource": "vm", "subResources": ["state", 7]}}),
     "unknown sub-resource of vm: 7"),
    (json.dumps({"instance": "i", "service": "t", "resources": [
        {"resource": "vm", "subResources": ["state"]},
        {"resource": "vm", "subResources": ["nics", "alais"]}]}),
     "unknown sub-resource of vm: alais"),
    # a tester's: a string was refused as missing, and an instance of any length was kept
    (json.dumps({**V1, "changeKind": {"resource": "vm", "subResources": "state"}}),
     '"subResources" should be a list of names, as ["state"]'),
    (json.dumps({**V1, "instance": "i" * 257}), '"instance" should be at most 256 characters'),
    # a tester's: Python's None told of what was missing or sent as null, and an empty
    # instance was taken
    (json.dumps({**V1, "changeKind": {"subResources": ["state"]}}),
     'each resource should contain "resource" (one of: vm)'),
    (json.dumps({**V1, "changeKind": {"resource": None, "subResources": ["state"]}}),
     "unknown resource: null"),
    (json.dumps({**V1, "changeKind": {"resource": "vm", "subResources": ["state", None]}}),
     "unknown sub-resource of vm: null"),
    (json.dumps({**V1, "changeKind": {"resource": "vm", "subResources": [True]}}),
     "unknown sub-resource of vm: true"),
    (json.dumps({**V1, "instance": ""}), 'registration should contain an "instance" identifier'),
    (json.dumps({**V1, "changeKind": {"resource": ["vm"], "subResources": ["state"]}}),
     'unknown resource: ["vm"]'),
], ids=["not json", "no instance", "unknown resource", "after 2**64", "after true", "binary",
        "binary json", "unknown sub-resource", "no sub-resource", "not a name", "v2 unknown",
        "sub-resources not a list", "instance too long", "no resource", "null resource",
        "null sub-resource", "true sub-resource", "empty instance", "resource a list"])
def test_a_bad_registration_is_closed_with_the_reason(services, registration, reason):
    with live_server(services) as url, connect(_ws(url)) as ws:
        ws.send(registration)
        with pytest.raises(ConnectionClosedError):
            ws.recv(timeout=10)
        assert ws.close_code == 1008 and reason in ws.close_reason


@pytest.mark.parametrize("later", ["heartbeat", b"\x00\x01"], ids=["text", "binary"])
def test_messages_after_the_registration_are_ignored_and_the_stream_goes_on(services, later):
    # found by a tester: a binary frame after registering ended the stream (close 1006)
    with live_server(services) as url, connect(_ws(url)) as ws:
        ws.send(json.dumps(V1))
        json.loads(ws.recv(timeout=10))
        ws.send(later)
        ws.send(later)
        assert ws.ping().wait(10)  # the server has read them before the change is made
        vm_uuid = create_vm(services, OWNER_A)
        assert _changes_of(ws, vm_uuid, 1)[0]["changedResourceId"] == vm_uuid


@pytest.mark.parametrize("after, message", [
    ("abc", "must be an integer"), ("-1", "must be 0 to 9007199254740991"),
    ("%C2%B2", "must be an integer"), ("1_0", "must be an integer"),
    (str(2**64), "must be 0 to 9007199254740991")])
def test_a_bad_after_on_the_upgrade_is_refused_before_it_naming_it(services, after, message):
    # found by a new user: ?after=abc was ignored (the stream started from now) and a digit
    # int() does not read ("²") dropped the connection with no close frame; then it was
    # accepted and closed at once (1008), where every route refuses a bad query with HTTP
    with live_server(services) as url:
        response = refused_upgrade(_ws(url) + "?after=" + after)
        assert httpx.get(url + "/changefeeds/stats").json()["listeners"] == 0
    assert response.status_code == 409
    assert json.loads(response.body) == {
        "code": "ValidationFailed", "message": "Invalid Parameters",
        "errors": [{"field": "after", "code": "Invalid", "message": message}]}


def test_a_listener_resumes_after_a_position_and_skips_unregistered_sub_resources(services):
    first = create_vm(services, OWNER_A)
    second = create_vm(services, OWNER_A)
    only_tags = {**V1, "changeKind": {"resource": "vm", "subResources": ["alias"]}, "after": 0}
    with live_server(services, background=False) as url, connect(_ws(url)) as ws:
        ws.send(json.dumps(only_tags))
        json.loads(ws.recv(timeout=10))
        got = [json.loads(ws.recv(timeout=10)) for _ in range(2)]
    # Each VM's Created names alias; their JobQueued events name nothing and are not sent.
    assert [g["changedResourceId"] for g in got] == [first, second]
    assert got[0]["position"] < got[1]["position"]


def test_a_listener_catching_up_reads_each_change_stamped_with_its_own_time(services):
    # found by a tester: "published" was the time of the send, so a listener resuming with
    # "after" saw every old change as made just now; Triton's publisher stamps the change's
    # own time
    first, second = create_vm(services, OWNER_A), create_vm(services, OWNER_A)
    created = {str(e.originator_id): e.timestamp for e in (
        services.app.mapper.to_domain_event(n)
        for n in services.app.recorder.select_notifications(1, 100))
        if type(e).__name__ == "Created"}
    made_ms = {vm: epoch_ms(moment) for vm, moment in created.items()}
    # the changes are read strictly later than they were made, in whole milliseconds
    assert wait_until(lambda: time.time() * 1000 >= max(made_ms.values()) + 2)
    only_alias = {**V1, "changeKind": {"resource": "vm", "subResources": ["alias"]}, "after": 0}
    with live_server(services, background=False) as url, connect(_ws(url)) as ws:
        ws.send(json.dumps(only_alias))
        json.loads(ws.recv(timeout=10))
        got = [json.loads(ws.recv(timeout=10)) for _ in range(2)]
    assert [(g["changedResourceId"], g["published"]) for g in got] == [
        (first, str(made_ms[first])), (second, str(made_ms[second]))]


def test_with_tokens_a_listener_needs_one_and_an_owner_gets_its_own_vms_only(
        tokened_services, tokens):
    from websockets.exceptions import InvalidStatus

    from tests.changes.scenarios import OWNER_B

    services = tokened_services
    with live_server(services, background=False) as url:
        with pytest.raises(InvalidStatus), connect(_ws(url)) as ws:
            ws.recv(timeout=10)
        with connect(_ws(url) + f"?token={tokens['owner_a']}") as ws:
            ws.send(json.dumps({**V1, "changeKind": {"resource": "vm",
                                                     "subResources": ["alias"]}}))
            json.loads(ws.recv(timeout=10))
            create_vm(services, OWNER_B)
            mine = create_vm(services, OWNER_A)
            assert json.loads(ws.recv(timeout=10))["changedResourceId"] == mine


def test_a_listener_that_hangs_up_is_gone_at_once_not_at_its_next_heartbeat(services):
    assert services.settings.changes_heartbeat_s >= 15  # nothing sent to it meanwhile
    with live_server(services) as url:
        with connect(_ws(url)) as ws:
            ws.send(json.dumps(V1))
            json.loads(ws.recv(timeout=10))  # registered, bootstrapped: its stream is open
        wait_until(lambda: httpx.get(url + "/changefeeds/stats").json()["listeners"] == 0,
                   "the listener's registration to end", timeout=5)
        assert "vmledger_change_streams{protocol=\"changefeed\"} 0.0" in httpx.get(
            url + "/metrics").text


@pytest.mark.parametrize("query, field, message", [
    ("?after=1000000&after=0", "after", "may be given only once"),
    ("?after=0&after=0", "after", "may be given only once"),
    ("?foo=1&after=0", "foo", "Invalid parameter"),
    ("?consistency=eventual", "consistency", "Invalid parameter"),
    ("?owner_uuid=930896af-bf8c-48d4-885c-6573a94b1853", "owner_uuid", "Invalid parameter"),
    ("?%00=1", "\\x00", "\\x00 (the key): strings may not contain the NUL character"),
    ("?after=0&token=%00", "token", "strings may not contain the NUL character"),
], ids=["after twice", "after twice, equal", "unknown", "consistency", "owner_uuid", "NUL",
        "NUL value"])
def test_a_repeated_or_unknown_parameter_on_the_upgrade_is_refused_before_it_naming_it(
        services, query, field, message):
    # found by a tester: the upgrade took the last of two "after"s (and streamed from it) and
    # ignored an unknown parameter, where every other route refuses both by name; then it
    # was accepted and closed at once (1008), where every route answers with HTTP
    with live_server(services) as url:
        response = refused_upgrade(_ws(url) + query)
        assert httpx.get(url + "/changefeeds/stats").json()["listeners"] == 0
    assert response.status_code == 409
    assert json.loads(response.body)["errors"] == [
        {"field": field, "code": "Invalid", "message": message}]


@pytest.mark.parametrize("registration, refusal", [
    ({**V1, "instance": "\ud800"}, "instance: strings must be valid Unicode"),
    ({**V1, "service": "a\x00"}, "service: strings may not contain the NUL character"),
    ({**V1, "changeKind": {"resource": "vm", "subResources": ["state", "\ud800"]}},
     "changeKind.subResources[1]: strings must be valid Unicode"),
    ({**V1, "note": float("nan")}, "note: numbers must be finite"),
], ids=["instance", "service", "sub-resource", "NaN"])
def test_parse_registration_refuses_text_no_answer_could_carry_naming_where(
        registration, refusal):
    # it was the route's check, made after parsing on what stats shows: every caller of
    # parse_registration gets it now
    with pytest.raises(RegistrationError) as refused:
        parse_registration(json.dumps(registration))
    assert str(refused.value).startswith(f"bad registration: {refusal}")


@pytest.mark.parametrize("instance", ["\\ud800", "a\\u0000"], ids=["surrogate", "NUL"])
def test_a_registration_holding_text_no_answer_can_carry_is_closed_and_stats_still_answer(
        services, instance):
    # a listener's instance is shown by /changefeeds/stats: a lone surrogate there made every
    # later stats read answer 500 while the listener was registered
    registration = json.dumps(V1).replace(V1["instance"], instance)
    with live_server(services) as url, connect(_ws(url)) as ws:
        ws.send(registration)
        with pytest.raises(ConnectionClosedError):
            ws.recv(timeout=10)
        assert ws.close_code == 1008 and "instance" in ws.close_reason, ws.close_reason
        assert httpx.get(url + "/changefeeds/stats").status_code == 200
