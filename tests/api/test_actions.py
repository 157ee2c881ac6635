"""VM actions: ``POST /vms/{uuid}?action=start|stop|kill|reboot|update`` (api.md, "Endpoints",
"Concurrency and idempotency", "DeleteVm and actions: version 1 vs version 2")."""

from __future__ import annotations

import uuid

import pytest

from tests.api.helpers import (
    OTHER_OWNER, V2, act, act_and_wait, assert_error, create_running_vm, create_vm,
    error_fields, get_vm, vm_body, wait_job,
)


def etag_version(response) -> int:
    return int(response.headers["ETag"].strip('"'))


def test_stop_start_reboot_and_kill_each_queue_a_job_whose_end_changes_the_vm(
        client, services) -> None:
    vm_uuid = create_running_vm(client)
    server_uuid = get_vm(client, vm_uuid)["server_uuid"]
    boots = services.fleet.boots(vm_uuid)
    for action, job_name, state in (("stop", "stop", "stopped"), ("start", "start", "running"),
                                    ("reboot", "reboot", "running"), ("kill", "stop", "stopped")):
        response = act(client, vm_uuid, action)
        assert response.status_code == 202, response.text
        assert set(response.json()) == {"vm_uuid", "job_uuid"}
        assert response.json()["vm_uuid"] == vm_uuid
        assert response.headers["Location"] == f"/vms/{vm_uuid}"
        assert response.headers["workflow-api"]
        job = wait_job(client, response.json()["job_uuid"])
        assert (job["name"], job["execution"], job["vm_uuid"]) == (job_name, "succeeded", vm_uuid)
        vm = get_vm(client, vm_uuid)
        assert vm["state"] == state, action
        assert vm["server_uuid"] == server_uuid
    assert services.fleet.boots(vm_uuid) == boots + 2  # start and reboot booted it
    assert services.jobs.get(job["uuid"])["params"]["args"] == {"force": True}  # kill
    assert get_vm(client, vm_uuid)["desired_state"] == "stopped"


def test_update_changes_alias_metadata_and_tags(client) -> None:
    vm_uuid = create_running_vm(client, alias="old", tags={"keep": "me"})
    changes = {"alias": "new", "customer_metadata": {"motd": "hi"},
               "internal_metadata": {"ops": 1}, "tags": {"role": "web"}}
    job = act_and_wait(client, vm_uuid, "update", json=changes)
    assert (job["name"], job["execution"]) == ("update", "succeeded")
    vm = get_vm(client, vm_uuid)
    assert {k: vm[k] for k in changes} == changes
    assert vm["state"] == "running"
    assert client.get("/vms", params={"tag.role": "web"}).json()[0]["uuid"] == vm_uuid


def test_update_refuses_an_unknown_or_out_of_bounds_field_naming_it(client, services) -> None:
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    for body, field in (({"ram": 1024}, "ram"), ({"alias": "x" * 190}, "alias"),
                        ({"tags": {f"k{i}": 1 for i in range(129)}}, "tags")):
        response = act(client, vm_uuid, "update", json=body)
        assert error_fields(assert_error(response, 409, "ValidationFailed")) == {field: "Invalid"}
    assert services.commands.head_position() == head


def test_update_naming_nothing_to_change_is_refused_and_queues_no_job(client, services) -> None:
    """VMAPI's UpdateVm: 'No VM parameters provided' when the body names no updatable field."""
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    for body in (None, {}, {"sync": False}, {"context": {"from": "test"}}):
        for headers in ({}, V2):
            response = act(client, vm_uuid, "update", json=body, headers=headers)
            error = assert_error(response, 409 if not headers else 422, "ValidationFailed")
            assert (error["message"], error["errors"]) == ("No VM parameters provided", [])
    assert services.commands.head_position() == head


def test_v2_action_on_a_provisioning_vm_is_queued_behind_the_provision(paused) -> None:
    http = paused.http
    created = create_vm(http)
    stop = act(http, created["vm_uuid"], "stop", headers=V2)
    assert stop.status_code == 202, stop.text
    stop_uuid = stop.json()["job_uuid"]
    vm = get_vm(http, created["vm_uuid"])
    assert vm["queued_job_uuids"] == [created["job_uuid"], stop_uuid]
    paused.run_jobs()
    provision, stopped = wait_job(http, created["job_uuid"]), wait_job(http, stop_uuid)
    assert provision["execution"] == stopped["execution"] == "succeeded"
    assert provision["finished_at"] <= stopped["started_at"]
    assert get_vm(http, created["vm_uuid"])["state"] == "stopped"


def test_repeating_a_queued_action_returns_the_same_job_and_appends_nothing(
        paused, services) -> None:
    http = paused.http
    created = create_vm(http)
    paused.run_jobs()
    first = act(http, created["vm_uuid"], "stop")
    assert first.status_code == 202
    head = services.commands.head_position()
    again = act(http, created["vm_uuid"], "stop")
    assert again.status_code == 202
    assert again.json() == first.json()
    assert etag_version(again) == etag_version(first)
    assert services.commands.head_position() == head
    # another action is another job
    start = act(http, created["vm_uuid"], "start")
    assert start.json()["job_uuid"] != first.json()["job_uuid"]


@pytest.mark.parametrize("repeat", [{"headers": V2}, {"params": {"idempotent": "true"}}],
                         ids=["version 2", "idempotent"])
def test_a_repeat_that_would_behave_otherwise_is_not_merged_into_the_active_job(
        paused, repeat) -> None:
    """Found by a tester: a v1 stop of a stopped VM (which fails) took in a v2 or idempotent
    stop, answered its job, and so failed it too; a repeat merges only into a job that does
    what it would (api.md, "Concurrency and idempotency")."""
    http = paused.http
    created = create_vm(http)
    paused.run_jobs()
    vm_uuid = created["vm_uuid"]
    assert act(http, vm_uuid, "stop").status_code == 202
    paused.run_jobs()
    assert get_vm(http, vm_uuid)["state"] == "stopped"
    v1 = act(http, vm_uuid, "stop").json()["job_uuid"]
    extra = repeat.get("params", {})
    again = http.post(f"/vms/{vm_uuid}", params={"action": "stop", **extra},
                      headers=repeat.get("headers", {}))
    assert again.status_code == 202, again.text
    assert again.json()["job_uuid"] != v1
    paused.run_jobs()
    assert wait_job(http, v1)["execution"] == "failed"
    assert wait_job(http, again.json()["job_uuid"])["execution"] == "succeeded"


def test_a_repeat_with_an_opposite_job_queued_between_is_a_new_job_so_the_last_intent_wins(
        paused, services) -> None:
    """stop, start, stop: the second stop is not merged into the first (which runs before the
    start), so the VM ends as the last acknowledged command says (issue #13, input 9)."""
    http = paused.http
    created = create_vm(http)
    paused.run_jobs()
    first = act(http, created["vm_uuid"], "stop").json()["job_uuid"]
    start = act(http, created["vm_uuid"], "start").json()["job_uuid"]
    last = act(http, created["vm_uuid"], "stop")
    assert last.status_code == 202
    assert last.json()["job_uuid"] not in (first, start)
    # a repeat of the last job is still merged
    assert act(http, created["vm_uuid"], "stop").json()["job_uuid"] == last.json()["job_uuid"]
    paused.run_jobs()
    assert [wait_job(http, j)["execution"] for j in (first, start, last.json()["job_uuid"])] \
        == ["succeeded"] * 3
    assert get_vm(http, created["vm_uuid"])["state"] == "stopped"


def test_stop_on_a_stopped_vm_fails_in_v1_and_succeeds_with_idempotent_or_in_v2(client) -> None:
    vm_uuid = create_running_vm(client)
    act_and_wait(client, vm_uuid, "stop")
    v1 = act_and_wait(client, vm_uuid, "stop")
    assert v1["execution"] == "failed"
    assert v1["error"] == "Cannot stop a VM from a 'stopped' state"
    assert v1["chain_results"][-1]["error"] == v1["error"]
    idempotent = act_and_wait(client, vm_uuid, "stop", idempotent="true")
    assert idempotent["execution"] == "succeeded"
    in_body = act_and_wait(client, vm_uuid, "stop", json={"idempotent": True})
    assert in_body["execution"] == "succeeded"
    v2 = act_and_wait(client, vm_uuid, "stop", headers=V2)
    assert v2["execution"] == "succeeded"
    assert not v2["chain_results"][-1]["error"]
    assert get_vm(client, vm_uuid)["state"] == "stopped"


@pytest.mark.parametrize("field", ["idempotent", "sync"])
@pytest.mark.parametrize("value", ["yes", "on", "t", "True", 1, 0, "no", "", None])
def test_a_body_boolean_is_true_or_false_and_nothing_else(paused, services, field,
                                                          value) -> None:
    """Found by a tester: the body's booleans took pydantic's lax ones ("yes", "on", 1 read
    as true), where the query refuses them and VMAPI takes only true and "true"."""
    vm_uuid = create_vm(paused.http)["vm_uuid"]
    paused.run_jobs()  # running, its stop queued and never run
    head = services.commands.head_position()
    response = paused.http.post(f"/vms/{vm_uuid}?action=stop", json={field: value})
    if value is None:  # null is the field not given
        assert response.status_code == 202, response.text
        return
    body = assert_error(response, 409, "ValidationFailed")
    assert error_fields(body) == {field: "Invalid"}, body
    assert body["errors"][0]["message"] == "must be true or false"
    assert services.commands.head_position() == head


@pytest.mark.parametrize("value", [True, "true", False, "false"])
def test_a_body_boolean_may_be_json_or_text(paused, value) -> None:
    vm_uuid = create_vm(paused.http)["vm_uuid"]
    paused.run_jobs()
    response = paused.http.post(f"/vms/{vm_uuid}?action=update",
                                json={"alias": "b", "idempotent": value})
    assert response.status_code == 202, response.text


def test_start_on_a_running_vm_fails_in_v1_and_succeeds_in_v2(client) -> None:
    vm_uuid = create_running_vm(client)
    assert act_and_wait(client, vm_uuid, "start")["error"] == (
        "Cannot start a VM from a 'running' state")
    assert act_and_wait(client, vm_uuid, "start", headers=V2)["execution"] == "succeeded"


def test_an_unknown_or_missing_action_is_a_validation_error(client, services) -> None:
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    body = assert_error(act(client, vm_uuid, "explode"), 409, "ValidationFailed")
    assert error_fields(body) == {"action": "Invalid"}
    assert_error(act(client, vm_uuid, "explode", headers=V2), 422, "ValidationFailed")
    missing = client.post(f"/vms/{vm_uuid}")
    assert error_fields(assert_error(missing, 409, "ValidationFailed")) == {"action": "Missing"}
    unknown = act(client, vm_uuid, "stop", json={"colour": "blue"})
    assert error_fields(assert_error(unknown, 409, "ValidationFailed")) == {"colour": "Invalid"}
    bad_param = act(client, vm_uuid, "stop", colour="blue")
    assert error_fields(assert_error(bad_param, 409, "ValidationFailed")) == {"colour": "Invalid"}
    assert services.commands.head_position() == head


def test_if_match_with_a_wrong_version_is_412_and_appends_nothing(client, services) -> None:
    vm_uuid = create_running_vm(client)
    current = get_vm(client, vm_uuid)["version"]
    head = services.commands.head_position()
    response = act(client, vm_uuid, "stop", headers={"If-Match": f'"{current - 1}"'})
    body = assert_error(response, 412, "PreconditionFailed")
    assert body["current_version"] == current
    assert response.headers["ETag"] == f'"{current}"'
    delete = client.delete(f"/vms/{vm_uuid}", headers={"If-Match": f'"{current + 5}"'})
    assert assert_error(delete, 412, "PreconditionFailed")["current_version"] == current
    assert services.commands.head_position() == head
    malformed = act(client, vm_uuid, "stop", headers={"If-Match": "yesterday"})
    assert error_fields(assert_error(malformed, 409, "ValidationFailed")) == {
        "If-Match": "Invalid"}


@pytest.mark.parametrize("header", ['"0"', '"-1"', "0", 'W/"0"', f'"{2**53}"',
                                    '"99999999999999999999999"', '"9" * 5000'])
def test_if_match_out_of_the_version_range_is_refused_as_version_is(client, services,
                                                                    header) -> None:
    # found by a tester: these answered 412, as if a VM could be at version 0, -1 or 2**70
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    header = f'"{"9" * 5000}"' if header == '"9" * 5000' else header
    body = assert_error(act(client, vm_uuid, "stop", headers={"If-Match": header}),
                        409, "ValidationFailed")
    [error] = body["errors"]
    assert (error["field"], error["code"]) == ("If-Match", "Invalid")
    # the words of ?version='s refusal
    at_zero = assert_error(client.get(f"/vms/{vm_uuid}", params={"version": 0}),
                           409, "ValidationFailed")
    assert error["message"] == at_zero["errors"][0]["message"] == "must be 1 to 9007199254740991"
    assert services.commands.head_position() == head
    assert_error(client.delete(f"/vms/{vm_uuid}", headers={"If-Match": header, **V2}),
                 422, "ValidationFailed")


@pytest.mark.parametrize("header", ['"7_0"', '" 7"', '"7 "', "7.0", '""',
                                    # tester D, bug 7: each of these was read as version 5
                                    "+5", '"+5"', '"""5"""', "W/5", '"5', '5"', 'W/W/"5"',
                                    '"W/5"', 'W/"5', '"5"5"', '"5", "6"'])
def test_if_match_that_is_no_decimal_version_is_refused(client, header) -> None:
    vm_uuid = create_running_vm(client)
    body = assert_error(act(client, vm_uuid, "stop", headers={"If-Match": header}),
                        409, "ValidationFailed")
    assert error_fields(body) == {"If-Match": "Invalid"}


def test_if_match_with_the_current_version_is_accepted(client) -> None:
    vm_uuid = create_running_vm(client)
    current = client.get(f"/vms/{vm_uuid}").headers["ETag"]
    response = act(client, vm_uuid, "stop", headers={"If-Match": current})
    assert response.status_code == 202, response.text
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"


def test_sync_true_answers_only_once_the_job_has_ended(client, services) -> None:
    vm_uuid = create_running_vm(client)
    # every simulated operation takes a while: an answer before the job's end would show it
    assert client.put("/sim/latency", json={"seconds": 0.05}).status_code == 200
    for response in (act(client, vm_uuid, "stop", sync="true"),
                     act(client, vm_uuid, "start", json={"sync": True}),
                     client.delete(f"/vms/{vm_uuid}", params={"sync": "true"})):
        assert response.status_code == 202, response.text
        assert services.jobs.get(response.json()["job_uuid"])["execution"] == "succeeded"


def test_a_sync_answer_carries_the_vm_version_once_its_job_ended(client, services) -> None:
    """Found by a tester: ``sync=true`` answered the version at acceptance (ETag "10" where
    GET showed "14"), so an ``If-Match`` taken from it was 412. An answer given after the
    job ended is read-your-writes consistent: its ETag is the VM's version then."""
    def answered_as_it_now_is(response) -> str:
        assert response.status_code == 202, response.text
        assert services.jobs.get(response.json()["job_uuid"])["execution"] == "succeeded"
        now = client.get(f"/vms/{response.json()['vm_uuid']}")
        assert response.headers["ETag"] == now.headers["ETag"], response.json()
        return response.json()["vm_uuid"]

    vm_uuid = answered_as_it_now_is(client.post("/vms", json=vm_body(),
                                                params={"sync": "true"}))
    answered_as_it_now_is(act(client, vm_uuid, "stop", sync="true"))
    started = act(client, vm_uuid, "start", json={"sync": True})
    answered_as_it_now_is(started)
    update = act(client, vm_uuid, "update", json={"alias": "next"},
                 headers={"If-Match": started.headers["ETag"]})
    assert update.status_code == 202, update.text


def test_an_action_on_another_owners_or_an_unknown_vm_is_404(client, services) -> None:
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    assert_error(act(client, vm_uuid, "stop", owner_uuid=OTHER_OWNER), 404, "ResourceNotFound")
    assert_error(act(client, vm_uuid, "stop", json={"owner_uuid": OTHER_OWNER}),
                 404, "ResourceNotFound")
    assert_error(client.delete(f"/vms/{vm_uuid}", params={"owner_uuid": OTHER_OWNER}),
                 404, "ResourceNotFound")
    assert_error(act(client, str(uuid.uuid4()), "stop"), 404, "ResourceNotFound")
    assert_error(client.delete(f"/vms/{uuid.uuid4()}"), 404, "ResourceNotFound")
    assert services.commands.head_position() == head


def test_the_same_idempotency_key_replays_the_first_answer_and_appends_nothing(
        paused, services) -> None:
    http = paused.http
    created = create_vm(http)
    paused.run_jobs()
    key = {"Idempotency-Key": "stop-once"}
    first = act(http, created["vm_uuid"], "stop", headers=key)
    assert first.status_code == 202
    head = services.commands.head_position()
    again = act(http, created["vm_uuid"], "stop", headers=key)
    assert (again.status_code, again.json()) == (202, first.json())
    assert services.commands.head_position() == head
    other = act(http, created["vm_uuid"], "reboot", headers=key)
    assert_error(other, 422, "IdempotencyKeyReused")
    assert services.commands.head_position() == head


def test_the_same_idempotency_key_on_create_returns_the_same_vm(paused, services) -> None:
    key = {"Idempotency-Key": "create-once"}
    first = create_vm(paused.http, headers=key)
    head = services.commands.head_position()
    assert create_vm(paused.http, headers=key) == first
    assert services.commands.head_position() == head
    response = paused.http.post("/vms", json={"owner_uuid": OTHER_OWNER, "brand": "joyent",
                                              "ram": 128}, headers=key)
    assert_error(response, 422, "IdempotencyKeyReused")
    assert services.commands.head_position() == head
