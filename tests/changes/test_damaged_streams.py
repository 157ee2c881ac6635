"""One damaged stream (an event deleted, made undecodable, or made one its fold cannot apply,
behind the service's back) is that stream's business alone: ``GET /changes``,
``/changefeeds`` and ``vmledger changes`` go on for every client, telling each change the
damage keeps from being folded as a ``damaged`` change (api.md, "Changes"). Found by
testers: the fold's error dropped every stream, a gap's first, then an event's refusal."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from typer.testing import CliRunner
from websockets.sync.client import connect

from service.cli.app import cli
from tests.changes.live import live_server, sse_events
from tests.changes.scenarios import OWNER_A, create_vm, log_positions, quarantine_and_release
from tests.changes.test_scoping import read_to_head
from tests.tampering import delete_event, set_event_column

SNAPSHOT_TOPIC = "eventsourcing.domain:Snapshot"

# How each damage is made (on a stream of versions 1 to 6), the versions still told as usual
# before it, the first version whose change is damaged, and the fold's words for it.
DAMAGES = {
    "first event deleted": (lambda s, vm: delete_event(s, vm, 1), [], 2,
                            "has a gap: its event of version 2 is its first"),
    "event deleted": (lambda s, vm: delete_event(s, vm, 3), [1, 2], 4,
                      "has a gap: its event of version 4 follows version 2"),
    "undecodable event": (lambda s, vm: set_event_column(s, vm, 3, "state", b"\xff not json"),
                          [1, 2], 3, "has an unreadable event at version 3"),
    # its Quarantined made a Started, which a provisioning VM refuses: the refusal raised
    # out of the fold and every stream stopped (tester E, bug 1)
    "event refused": (lambda s, vm: set_event_column(s, vm, 3, "topic", "vm.started"),
                      [1, 2], 3, "has an event its fold cannot apply at version 3 "
                                 "(IllegalTransitionError: Started cannot happen"),
    # a class that is no event of a stream at all: its fold raised AttributeError
    "snapshot's topic": (lambda s, vm: set_event_column(s, vm, 3, "topic", SNAPSHOT_TOPIC),
                         [1, 2], 3, "has an event its fold cannot apply at version 3"),
}


@pytest.fixture(params=DAMAGES.values(), ids=DAMAGES.keys())
def damaged(request, tokened_services) -> dict:
    """A VM of owner A whose stream is damaged, then a healthy VM of owner A created after it:
    their uuids, the versions told as usual, those whose changes the damage keeps from being
    folded and the fold's words."""
    damage, as_usual, first_damaged, words = request.param
    services = tokened_services
    vm_uuid = create_vm(services, OWNER_A, "damaged")
    quarantine_and_release(services, vm_uuid)
    last = services.commands.load(vm_uuid).version
    damage(services, vm_uuid)
    return {"vm": vm_uuid, "healthy": create_vm(services, OWNER_A, "healthy"),
            "as_usual": as_usual, "damaged_versions": list(range(first_damaged, last + 1)),
            "words": f"stream {vm_uuid} {words}"}


def _assert_damaged_changes(changes: list[dict], damaged: dict) -> None:
    of_damaged = [c for c in changes if c.get("vm_uuid") == damaged["vm"]]
    told = [c for c in of_damaged if c["type"] == "damaged"]
    assert [c["version"] for c in told] == damaged["damaged_versions"]
    for change in told:
        assert change["error"].startswith(damaged["words"]), change
        assert change["error"].endswith("the log needs repair"), change
    assert [c["version"] for c in of_damaged if c not in told] == damaged["as_usual"]


def test_get_changes_tells_the_damage_and_goes_on(tokened_services, tokens, damaged):
    services = tokened_services
    with live_server(services, background=False) as url, httpx.Client(
            base_url=url, timeout=30) as client:
        everything = read_to_head(client, {}, tokens["operator"])
        assert [c["position"] for c in everything] == log_positions(services, 0)
        _assert_damaged_changes(everything, damaged)
        healthy = read_to_head(client, {"vm_uuid": damaged["healthy"]}, tokens["operator"])
        assert [c["type"] for c in healthy] == ["Created", "JobQueued"]
        # an owner is never shown a change whose owner could not be folded
        owned = read_to_head(client, {}, tokens["owner_a"])
        assert [c["version"] for c in owned if c["vm_uuid"] == damaged["vm"]] == [
            v for v in damaged["as_usual"] if v < 3]  # from 3 on, quarantined, then damaged
        assert [c["type"] for c in owned if c["vm_uuid"] == damaged["healthy"]] == [
            "Created", "JobQueued"]


def test_a_live_stream_tells_a_new_event_of_a_damaged_stream_and_goes_on(
        tokened_services, tokens, damaged):
    # the hub's own reader, shared by every live stream, met the damage: it retried the same
    # batch for ever, so no stream got any change again
    services = tokened_services
    headers = {"Authorization": f"Bearer {tokens['operator']}"}
    with live_server(services, background=False) as url, httpx.Client(
            base_url=url, timeout=30) as client, client.stream(
            "GET", "/changes", headers=headers) as response:
        events = sse_events(response)
        # the opening comment, then a heartbeat: the stream follows the hub's reader now
        assert next(events) is None and next(events) is None
        services.quarantine.quarantine(damaged["vm"], "test", cause={"actor": "operator"})
        later = create_vm(services, OWNER_A, "later")
        seen, deadline = [], time.monotonic() + 30
        for event in events:  # heartbeats come every 10 ms: the deadline is looked at
            assert time.monotonic() < deadline, f"no change of {later} in 30 s: {seen}"
            if event is not None:
                seen.append(event.json)
                if event.json.get("vm_uuid") == later:
                    break
    told = [c for c in seen if c.get("vm_uuid") == damaged["vm"]]
    assert told[0]["version"] == damaged["damaged_versions"][-1] + 1, told
    for change in told:
        assert change["type"] == "damaged" and change["error"].startswith(damaged["words"])


def test_a_triton_listener_gets_the_healthy_vms_changes(tokened_services, tokens, damaged):
    registration = {"instance": "6f0f3b8e-0d5e-4d0b-9c5e-6d1f7a9b2c01", "service": "test",
                    "changeKind": {"resource": "vm", "subResources": ["alias", "state"]},
                    "after": 0}
    with live_server(tokened_services, background=False) as url, connect(
            url.replace("http://", "ws://") + "/changefeeds",
            additional_headers={"Authorization": f"Bearer {tokens['operator']}"}) as ws:
        ws.send(json.dumps(registration))
        json.loads(ws.recv(timeout=10))  # the bootstrap
        while True:  # the damaged stream's changes are passed over: they name no field
            message = json.loads(ws.recv(timeout=20))
            if message["changedResourceId"] == damaged["healthy"]:
                break


def test_vmledger_changes_prints_the_damage_and_goes_on(
        tokened_services, damaged, settings, monkeypatch):
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    everything = CliRunner().invoke(cli, ["changes"])
    assert everything.exit_code == 0, everything.output
    lines = everything.output.splitlines()
    assert [int(line.split()[0]) for line in lines] == log_positions(tokened_services, 0)
    told = [line for line in lines if " damaged " in line]
    assert told[0].startswith(
        f"{told[0].split()[0]} - vm {damaged['vm']} v{damaged['damaged_versions'][0]} damaged "
        f"error={damaged['words']}"), told
    healthy = CliRunner().invoke(cli, ["changes", "--vm-uuid", damaged["healthy"]])
    assert healthy.exit_code == 0 and len(healthy.output.splitlines()) == 2, healthy.output


def test_a_stream_that_cannot_read_the_log_ends_with_a_cut_event(
        tokened_services, tokens, monkeypatch):
    # anything else that stops a stream catching up (an outage) ends it with an event saying
    # so and where to resume, not a dropped connection
    from service.changes import hub

    class Failing(hub.ChangeFolder):
        def fold(self, notifications):
            raise RuntimeError("the database went away")

    create_vm(tokened_services, OWNER_A)
    with live_server(tokened_services, background=False) as url, httpx.Client(
            base_url=url, timeout=30) as client:
        monkeypatch.setattr(hub, "ChangeFolder", Failing)  # the catch-up's own folders
        with client.stream("GET", "/changes", params={"after": "0"},
                           headers={"Authorization": f"Bearer {tokens['operator']}"}) as response:
            events = [event for event in sse_events(response) if event is not None]
    [cut] = events
    assert (cut.event, cut.id) == ("cut", "0")
    assert cut.json == {"reason": "reading the log failed: the database went away",
                        "resume_after": 0}
