"""Filters and owner scoping of GET /changes: an owner sees exactly its own VMs' changes (as
the VM's owner after each event, folded from the log), in every combination of filters, with
no read model caught up (no projection runner runs here), across a quarantine that takes a VM
from its owner and a release that gives it back."""

from __future__ import annotations

import itertools

import httpx
import pytest
from fastapi.testclient import TestClient

from domain.vm import QUARANTINE_OWNER_UUID
from service.api.app import create_app
from tests.changes.live import live_server, sse_events
from tests.changes.scenarios import OWNER_A, OWNER_B, create_vm, quarantine_and_release


def read_to_head(client: httpx.Client, query: dict, token: str, *, in_query: bool = False
                 ) -> list[dict]:
    """Every change ``GET /changes?after=0&...`` sends before its first heartbeat (it sends
    none before it has caught up with the log)."""
    params = {"after": "0", **{k: v for k, v in query.items() if v is not None}}
    headers = {}
    if in_query:
        params["token"] = token
    else:
        headers["Authorization"] = f"Bearer {token}"
    found, comments = [], 0
    with client.stream("GET", "/changes", params=params, headers=headers) as response:
        assert response.status_code == 200, response.read()
        for event in sse_events(response):
            if event is None:
                comments += 1
                if comments == 2:  # the first is the stream's opening, the next a heartbeat
                    return found
                continue
            found.append(event.json)
    raise AssertionError("the stream ended")


@pytest.fixture
def history(tokened_services):
    """Three VMs: a1 and a2 of owner A, b1 of owner B; a1 quarantined then released, b1
    left in the quarantine. Returns their uuids."""
    services = tokened_services
    a1, a2 = create_vm(services, OWNER_A, "a1"), create_vm(services, OWNER_A, "a2")
    b1 = create_vm(services, OWNER_B, "b1")
    quarantine_and_release(services, a1)
    services.quarantine.quarantine(b1, "test", cause={"actor": "operator"})
    return {"a1": a1, "a2": a2, "b1": b1}


def _owner_at(services, change: dict) -> str:
    """The VM's owner after the change's event, folded by the service's own repository."""
    return services.commands.load(change["vm_uuid"], version=change["version"]).owner_uuid


def test_an_owner_sees_exactly_its_own_vms_in_every_combination_of_filters(
        tokened_services, tokens, history):
    services = tokened_services
    with live_server(services, background=False) as url, httpx.Client(base_url=url,
                                                                      timeout=30) as client:
        everything = read_to_head(client, {}, tokens["operator"])
        assert {c.get("vm_uuid") for c in everything} >= set(history.values())
        for change in everything:
            if "vm_uuid" in change:
                assert change["owner_uuid"] == _owner_at(services, change)
        assert any(c["owner_uuid"] == QUARANTINE_OWNER_UUID for c in everything
                   if "vm_uuid" in c)
        combinations = itertools.product(
            ("owner_a", "owner_b"),
            (None, history["a1"], history["b1"], f"{history['a1']},{history['b1']}"),
            (None, OWNER_A, OWNER_B, QUARANTINE_OWNER_UUID),
            (None, "Created,Quarantined,Released,JobCanceled"),
            (None, "provisioning,quarantined"),
        )
        for index, (who, vm_uuid, owner_uuid, types, states) in enumerate(combinations):
            own = OWNER_A if who == "owner_a" else OWNER_B
            query = {"vm_uuid": vm_uuid, "owner_uuid": owner_uuid, "type": types,
                     "state": states}
            got = read_to_head(client, query, tokens[who], in_query=index % 2 == 1)
            expected = [c for c in everything if "vm_uuid" in c
                        and c["owner_uuid"] == own
                        and (owner_uuid is None or owner_uuid == own)
                        and (vm_uuid is None or c["vm_uuid"] in vm_uuid.split(","))
                        and (types is None or c["type"] in types.split(","))
                        and (states is None or _state_after(everything, c) in states.split(","))]
            assert [c["position"] for c in got] == [c["position"] for c in expected], query
            for change in got:
                assert _owner_at(services, change) == own, (who, query, change)


def _state_after(everything: list[dict], change: dict) -> str | None:
    """The VM's state after ``change``: its own ``state``, or the last one before it."""
    state = None
    for earlier in everything:
        if earlier.get("vm_uuid") == change["vm_uuid"] and "state" in earlier:
            state = earlier["state"]
        if earlier["position"] == change["position"]:
            return state
    raise AssertionError("not in the log")


def test_operators_filter_servers_and_types(tokened_services, tokens, history):
    with live_server(tokened_services, background=False) as url, \
            httpx.Client(base_url=url, timeout=30) as client:
        servers = read_to_head(client, {"type": "Registered"}, tokens["operator"])
        assert servers and all("server_uuid" in c and "vm_uuid" not in c for c in servers)
        one = servers[0]["server_uuid"]
        assert {c["server_uuid"] for c in read_to_head(
            client, {"server_uuid": one}, tokens["operator"])} == {one}
        quarantined = read_to_head(client, {"state": "quarantined"}, tokens["operator"])
        assert {c["vm_uuid"] for c in quarantined} == {history["a1"], history["b1"]}


def test_uuid_filters_match_in_any_case(tokened_services, tokens, history):
    """``owner_uuid`` and ``server_uuid`` were refused in upper case ("Invalid UUID") while
    ``vm_uuid`` and ``vmledger changes`` took any case, as docs/api.md says (changefeed
    tester)."""
    with live_server(tokened_services, background=False) as url, \
            httpx.Client(base_url=url, timeout=30) as client:
        operator = tokens["operator"]
        server = read_to_head(client, {"type": "Registered"}, operator)[0]["server_uuid"]
        for name, value in (("owner_uuid", OWNER_A), ("server_uuid", server),
                            ("vm_uuid", history["a1"])):
            lower = read_to_head(client, {name: value}, operator)
            assert lower, name
            assert read_to_head(client, {name: value.upper()}, operator) == lower, name


@pytest.mark.parametrize("query, headers, field", [
    ({"vm_uuid": "nope"}, {}, "vm_uuid"),
    ({"type": "Exploded"}, {}, "type"),
    # the events' abstract bases: no event in the log has one of them as its type
    ({"type": "Event"}, {}, "type"),
    ({"type": "Created,DomainEvent"}, {}, "type"),
    ({"type": "VmEvent"}, {}, "type"),
    ({"state": "melted"}, {}, "state"),
    ({"after": "-1"}, {}, "after"),
    ({"colour": "red"}, {}, "colour"),
    ({}, {"Last-Event-ID": "abc"}, "Last-Event-ID"),
    # not a position either (curl -H 'Last-Event-ID:' sends no header at all)
    ({}, {"Last-Event-ID": ""}, "Last-Event-ID"),
    # a digit int() does not read (a 500), and a position past what ?after= takes
    ({}, {"Last-Event-ID": "\u00b2".encode("latin-1")}, "Last-Event-ID"),
    ({}, {"Last-Event-ID": str(2**64)}, "Last-Event-ID"),
    # the header and ?after= are read by one parser: int() took "1_0" and other scripts'
    # digits in ?after= but the header refused them
    ({"after": "1_0"}, {}, "after"),
    ({"after": "٣"}, {}, "after"),
    ({}, {"Last-Event-ID": "1_0"}, "Last-Event-ID"),
    # an empty element is a malformed list, refused as an empty list is (console tester,
    # bug 4: the empty entries were dropped)
    ({"type": "Stopped,,Started"}, {}, "type"),
    ({"type": "Stopped,"}, {}, "type"),
    ({"type": ",Stopped"}, {}, "type"),
    ({"type": "Stopped, ,Started"}, {}, "type"),
    ({"state": "running,,stopped"}, {}, "state"),
    ({"vm_uuid": "930896af-bf8c-48d4-885c-6573a94b1853,"}, {}, "vm_uuid"),
])
def test_bad_parameters_are_refused_naming_the_field(tokened_services, tokens, query, headers,
                                                     field):
    with TestClient(create_app(services=tokened_services, background=False)) as client:
        response = client.get("/changes", params=query, headers={
            "Authorization": f"Bearer {tokens['operator']}", **headers})
    assert response.status_code == 409
    assert [e["field"] for e in response.json()["errors"]] == [field]


def test_the_token_parameter_is_only_for_changes_and_agents_are_refused(tokened_services, tokens):
    with TestClient(create_app(services=tokened_services, background=False)) as client:
        assert client.get("/vms", params={"token": tokens["operator"]}).status_code == 401
        assert client.get("/changes", params={"token": "wrong"}).status_code == 401
        assert client.get("/changes").status_code == 401
        refused = client.get("/changes", headers={"Authorization": f"Bearer {tokens['agent']}"})
        assert refused.status_code == 403


def test_the_changefeeds_listing_takes_the_token_parameter_as_its_websocket_does(
        tokened_services, tokens):
    # the bootstrap listing's GET was 401 with ?token= alone, though the same token counted
    # as given for its "give the token once" refusal, and its WebSocket took it (tester)
    with TestClient(create_app(services=tokened_services, background=False)) as client:
        listed = client.get("/changefeeds", params={"token": tokens["owner_a"]})
        assert listed.status_code == 200, listed.text
        assert client.get("/changefeeds", params={"token": "wrong"}).status_code == 401
        # not taken elsewhere: no token given, as on /vms
        assert client.get("/changefeeds/stats", params={"token": tokens["operator"]}
                          ).status_code == 401


def test_a_refused_value_names_its_field_once(tokened_services, tokens):
    """``?after=%00`` said ``"field": "after", "message": "after: strings may not contain
    …"`` (console tester, bug 4); an empty element names the list's field and says so."""
    with TestClient(create_app(services=tokened_services, background=False)) as client:
        auth = {"Authorization": f"Bearer {tokens['operator']}"}
        nul = client.get("/changes?after=%00", headers=auth).json()["errors"]
        empty = client.get("/changes?type=Stopped,,Started", headers=auth).json()["errors"]
    assert nul == [{"field": "after", "code": "Invalid",
                    "message": "strings may not contain the NUL character"}]
    assert empty == [{"field": "type", "code": "Invalid",
                      "message": "an empty value in the list (element 2)"}]
