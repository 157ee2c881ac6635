"""``/stats/*``: counts by state (and by owner or server), transitions, durations between
states, failures and stuck VMs, read from the analytics read model (api.md; docs/analytics.md).
Expected figures come from what the test did and from the VMs' own histories."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import pytest

from domain.vm import make_cause
from projections.analytics_queries import nearest_rank
from tests.api.helpers import (
    OTHER_OWNER,
    OWNER,
    V2,
    act_and_wait,
    assert_error,
    create_running_vm,
    create_vm,
    error_fields,
    get_vm,
    wait_job,
)
from tests.waiting import wait_until

NO_VMS = {"provisioning": 0, "running": 0, "stopped": 0, "failed": 0, "destroyed": 0,
          "quarantined": 0}


def failed_provision(client, **overrides) -> str:
    """A VM whose provision failed (VMAPI's test hook); returns its uuid."""
    created = create_vm(client, internal_metadata={"force_provision_failure": True}, **overrides)
    assert wait_job(client, created["job_uuid"])["execution"] == "failed"
    return created["vm_uuid"]


def epoch_ms(timestamp: str) -> int:
    moment = datetime.fromisoformat(timestamp)
    return int(moment.timestamp() * 1000 + 0.5)


def entered(client, vm_uuid: str, event_type: str) -> int:
    """When the VM's ``event_type`` event happened (epoch ms), from its history."""
    [event] = [e for e in client.get(f"/vms/{vm_uuid}/history").json()
               if e["type"] == event_type]
    return epoch_ms(event["timestamp"])


def test_states_counts_every_vm_by_its_state_now_listing_every_state(client) -> None:
    assert client.get("/stats/states").json() == NO_VMS
    create_running_vm(client)
    stopped = create_running_vm(client)
    act_and_wait(client, stopped, "stop")
    failed_provision(client)
    response = client.get("/stats/states")
    assert response.status_code == 200
    assert response.json() == {**NO_VMS, "running": 1, "stopped": 1, "failed": 1}


def test_states_by_owner_and_by_server_break_the_counts_down(client) -> None:
    mine = [create_running_vm(client), create_running_vm(client)]
    theirs = create_running_vm(client, owner_uuid=OTHER_OWNER)
    never_placed = failed_provision(client, owner_uuid=OTHER_OWNER)
    by_owner = client.get("/stats/states", params={"by": "owner"}).json()
    assert by_owner == sorted([
        {"owner_uuid": OWNER, "total": 2, "states": {**NO_VMS, "running": 2}},
        {"owner_uuid": OTHER_OWNER, "total": 2, "states": {**NO_VMS, "running": 1, "failed": 1}},
    ], key=lambda group: group["owner_uuid"])

    servers = Counter(get_vm(client, vm)["server_uuid"] for vm in [*mine, theirs])
    assert get_vm(client, never_placed)["server_uuid"] is None
    by_server = client.get("/stats/states", params={"by": "server"}).json()
    assert by_server[0] == {"server_uuid": None, "total": 1, "states": {**NO_VMS, "failed": 1}}
    assert {g["server_uuid"]: g["states"]["running"] for g in by_server[1:]} == servers
    assert [g["server_uuid"] for g in by_server[1:]] == sorted(servers)


def test_every_stats_route_counts_only_the_vms_of_the_owner_uuid_given(client) -> None:
    create_running_vm(client)
    theirs = create_running_vm(client, owner_uuid=OTHER_OWNER)
    act_and_wait(client, theirs, "stop")
    only_theirs = {"owner_uuid": OTHER_OWNER}
    assert client.get("/stats/states", params=only_theirs).json() == {**NO_VMS, "stopped": 1}
    assert client.get("/stats/transitions", params=only_theirs).json() == [
        {"from": "provisioning", "to": "running", "count": 1},
        {"from": "running", "to": "stopped", "count": 1},
    ]
    durations = client.get("/stats/durations", params={
        "from": "provisioning", "to": "running", **only_theirs}).json()
    assert durations["count"] == 1


def test_transitions_count_each_from_to_pair(client) -> None:
    running = create_running_vm(client)
    create_running_vm(client)
    act_and_wait(client, running, "stop")
    act_and_wait(client, running, "start")
    act_and_wait(client, running, "reboot")
    failed_provision(client)
    assert client.get("/stats/transitions").json() == [
        {"from": "provisioning", "to": "running", "count": 2},
        {"from": "provisioning", "to": "failed", "count": 1},
        {"from": "running", "to": "running", "count": 1},
        {"from": "running", "to": "stopped", "count": 1},
        {"from": "stopped", "to": "running", "count": 1},
    ]


def test_durations_give_count_percentiles_and_max_of_the_time_between_two_states(client) -> None:
    vms = [create_running_vm(client) for _ in range(3)]
    act_and_wait(client, vms[0], "stop")
    took = sorted(entered(client, vm, "Provisioned") - entered(client, vm, "Created")
                  for vm in vms)
    response = client.get("/stats/durations", params={"from": "provisioning", "to": "running"})
    assert response.status_code == 200
    assert response.json() == {
        "from": "provisioning", "to": "running", "count": 3,
        "p50_ms": took[1], "p90_ms": took[2], "p99_ms": took[2], "max_ms": took[2],
    }
    assert [nearest_rank(took, p) for p in (50, 90, 99)] == took[1:] + took[2:]
    # not one transition but two (provisioning -> running -> stopped): from the log's times
    stopped_after = entered(client, vms[0], "Stopped") - entered(client, vms[0], "Created")
    assert client.get("/stats/durations", params={"from": "provisioning", "to": "stopped"}
                      ).json() == {"from": "provisioning", "to": "stopped", "count": 1,
                                   "p50_ms": stopped_after, "p90_ms": stopped_after,
                                   "p99_ms": stopped_after, "max_ms": stopped_after}


def test_durations_between_states_no_vm_went_between_are_a_count_of_zero(client) -> None:
    create_running_vm(client)
    assert client.get("/stats/durations", params={"from": "failed", "to": "running"}
                      ).json() == {"from": "failed", "to": "running", "count": 0,
                                   "p50_ms": None, "p90_ms": None, "p99_ms": None,
                                   "max_ms": None}


def test_durations_need_two_different_states(client) -> None:
    body = assert_error(client.get("/stats/durations"), 409, "ValidationFailed")
    assert error_fields(body) == {"from": "Missing", "to": "Missing"}
    body = assert_error(client.get("/stats/durations", params={"from": "booting", "to": "running"},
                                   headers=V2), 422, "ValidationFailed")
    assert error_fields(body) == {"from": "Invalid"}
    body = assert_error(client.get("/stats/durations", params={"from": "running", "to": "running"}),
                        409, "ValidationFailed")
    assert error_fields(body) == {"to": "Invalid"}


def test_failures_count_by_reason_or_by_the_server_the_vm_failed_on(client, services) -> None:
    evicted, crashed, again = (create_running_vm(client) for _ in range(3))
    for vm, reason in ((evicted, "evicted"), (crashed, "crashed"), (again, "crashed")):
        services.commands.record_failure(vm, reason, f"test: {reason}", cause=make_cause("test"))
    provision = failed_provision(client)
    assert client.get("/stats/failures").json() == [
        {"reason": "crashed", "count": 2},
        {"reason": "evicted", "count": 1},
        {"reason": "provision_failed", "count": 1},
    ]
    assert client.get("/stats/failures", params={"by": "reason"}).json() == client.get(
        "/stats/failures").json()
    on = Counter(get_vm(client, vm)["server_uuid"] for vm in (evicted, crashed, again))
    # the failed provision failed on the server it had claimed (found by a tester: it was
    # counted on none), though its VM, its claim given back, shows none any more
    assert get_vm(client, provision)["server_uuid"] is None
    on[claimed_server(client, provision)] += 1
    by_server = client.get("/stats/failures", params={"by": "server"}).json()
    assert {f["server_uuid"]: f["count"] for f in by_server} == on
    assert [f["count"] for f in by_server] == sorted(on.values(), reverse=True)


def test_stuck_lists_vms_in_a_transient_state_for_at_least_older_than_seconds(paused) -> None:
    client = paused.http
    created = create_vm(client)  # the worker is paused: it stays provisioning
    stuck = client.get("/stats/stuck", params={"older_than": 0})
    assert stuck.status_code == 200
    [vm] = stuck.json()
    assert stuck.headers["x-joyent-resource-count"] == "1"
    assert (vm["vm_uuid"], vm["state"], vm["owner_uuid"], vm["server_uuid"]) == (
        created["vm_uuid"], "provisioning", OWNER, None)
    assert vm["since"] == get_vm(client, created["vm_uuid"])["create_timestamp"]
    assert vm["ms_in_state"] >= 0
    an_hour = client.get("/stats/stuck", params={"older_than": 3600})
    assert an_hour.json() == [] and an_hour.headers["x-joyent-resource-count"] == "0"
    # without older_than: the service's own threshold (VMLEDGER_STUCK_TRANSIENT_S)
    assert paused.services.settings.stuck_transient_s >= 60
    assert client.get("/stats/stuck").json() == []
    paused.run_jobs()
    assert client.get("/stats/stuck", params={"older_than": 0}).json() == []


def test_stuck_pages_by_limit_and_offset_through_every_vm_it_counts(paused) -> None:
    # a tester: the count said 3,468 but offset was refused, so past 1,000 none could be read
    client = paused.http
    created = {create_vm(client)["vm_uuid"] for _ in range(5)}
    everything = client.get("/stats/stuck", params={"older_than": 0}).json()
    assert {vm["vm_uuid"] for vm in everything} == created
    pages = []
    for offset in (0, 2, 4, 6):
        page = client.get("/stats/stuck", params={"older_than": 0, "limit": 2,
                                                  "offset": offset})
        assert page.status_code == 200, page.text
        assert page.headers["x-joyent-resource-count"] == "5"
        pages.append([vm["vm_uuid"] for vm in page.json()])
    assert [len(page) for page in pages] == [2, 2, 1, 0]
    # longest first, each once
    assert [uuid for page in pages for uuid in page] == [vm["vm_uuid"] for vm in everything]
    body = assert_error(client.get("/stats/stuck", params={"offset": "-1"}), 409,
                        "ValidationFailed")
    assert error_fields(body) == {"offset": "Invalid"}


def claimed_server(client, vm_uuid: str) -> str:
    """The server the VM last claimed, from its history."""
    return [e["data"]["server_uuid"] for e in client.get(f"/vms/{vm_uuid}/history").json()
            if e["type"] == "CapacityClaimed"][-1]


def test_a_provisioning_vm_is_counted_on_the_server_its_vm_object_shows(client) -> None:
    # found by a tester: GetVm showed a slow provision's claimed server, /stats put it
    # under null
    assert client.put("/sim/latency", json={"seconds": 3, "operation": "ensure_registered"}
                      ).status_code == 200
    created = create_vm(client)
    server = wait_until(lambda: get_vm(client, created["vm_uuid"])["server_uuid"],
                        "the VM object to show its claimed server")
    [stuck] = client.get("/stats/stuck", params={"older_than": 0}).json()
    assert (stuck["state"], stuck["server_uuid"]) == ("provisioning", server)
    assert server == claimed_server(client, created["vm_uuid"])
    assert client.get("/stats/states", params={"by": "server"}).json() == [
        {"server_uuid": server, "total": 1, "states": {**NO_VMS, "provisioning": 1}}]
    assert client.put("/sim/latency", json={"seconds": 0}).status_code == 200
    assert wait_job(client, created["job_uuid"])["execution"] == "succeeded"


def test_stuck_takes_older_than_in_whole_seconds_and_a_limit_from_1_to_1000(client) -> None:
    body = assert_error(client.get("/stats/stuck", params={"older_than": "-1", "limit": "0"}),
                        409, "ValidationFailed")
    assert error_fields(body) == {"older_than": "Invalid", "limit": "Invalid"}
    body = assert_error(client.get("/stats/stuck", params={"older_than": "1.5",
                                                           "limit": "1001"}),
                        409, "ValidationFailed")
    assert error_fields(body) == {"older_than": "Invalid", "limit": "Invalid"}


def test_stats_reflect_a_command_acknowledged_just_before(paused) -> None:
    for count in (1, 2):
        create_vm(paused.http)
        assert paused.http.get("/stats/states").json()["provisioning"] == count


@pytest.mark.parametrize("path", ["/stats/states", "/stats/transitions", "/stats/durations",
                                  "/stats/failures", "/stats/stuck"])
def test_an_unknown_parameter_is_refused_naming_it(client, path) -> None:
    body = assert_error(client.get(path, params={"bogus": "1", "from": "running",
                                                 "to": "failed", "older_than": "1"}
                                   if path in ("/stats/durations", "/stats/stuck")
                                   else {"bogus": "1"}), 409, "ValidationFailed")
    assert error_fields(body).get("bogus") == "Invalid"


def test_by_takes_only_the_breakdowns_each_route_knows(client) -> None:
    body = assert_error(client.get("/stats/states", params={"by": "reason"}), 409,
                        "ValidationFailed")
    assert error_fields(body) == {"by": "Invalid"}
    body = assert_error(client.get("/stats/failures", params={"by": "owner"}), 409,
                        "ValidationFailed")
    assert error_fields(body) == {"by": "Invalid"}


def test_the_projection_lag_of_each_read_model_is_served_as_a_prometheus_gauge(client) -> None:
    create_running_vm(client)
    names = client.get("/ping").json()["projection_lag"]

    def every_read_model_published() -> bool:
        text = client.get("/metrics").text
        return all(f'vmledger_projection_lag_events{{read_model="{name}"}}' in text
                   for name in names)

    assert wait_until(every_read_model_published)
    assert "analytics" in names
