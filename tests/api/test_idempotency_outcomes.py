"""What a repeated ``Idempotency-Key`` answers (docs/api.md, "Idempotency"): a quarantine or
release replays the VM as the first left it, as every VM command's replay does; a refused
request stores nothing under its key, so the same request is decided again (contract tester:
the docs said otherwise on both)."""

from __future__ import annotations

from tests.api.helpers import act, assert_error, create_running_vm, create_vm, wait_job


def test_a_quarantine_replayed_answers_the_vm_as_the_first_left_it(client, services) -> None:
    vm_uuid = create_running_vm(client)
    key = {"Idempotency-Key": "quarantine-once"}
    first = act(client, vm_uuid, "quarantine", headers=key, json={"reason": "audit"})
    assert first.status_code == 200, first.text
    released = act(client, vm_uuid, "release")
    assert released.json()["state"] == "running"
    head = services.commands.head_position()
    again = act(client, vm_uuid, "quarantine", headers=key, json={"reason": "audit"})
    assert (again.status_code, again.json()) == (200, first.json())
    assert again.headers["ETag"] == first.headers["ETag"] != released.headers["ETag"]
    assert "x-log-position" not in again.headers
    assert services.commands.head_position() == head


def test_a_refused_request_stores_nothing_under_its_key(paused, services) -> None:
    created = create_vm(paused.http)
    key = {"Idempotency-Key": "stop-when-it-runs"}
    head = services.commands.head_position()
    refused = act(paused.http, created["vm_uuid"], "stop", headers=key)
    assert_error(refused, 409, "UnallocatedVM")
    assert services.commands.head_position() == head
    paused.run_jobs()
    assert wait_job(paused.http, created["job_uuid"])["execution"] == "succeeded"
    accepted = act(paused.http, created["vm_uuid"], "stop", headers=key)
    assert accepted.status_code == 202, accepted.text
    assert "x-log-position" in accepted.headers  # carried out now, not a replay
    replayed = act(paused.http, created["vm_uuid"], "stop", headers=key)
    assert (replayed.status_code, replayed.json()) == (202, accepted.json())


def test_a_path_uuid_in_another_case_is_the_same_request_under_its_key(client, services):
    """Found by a tester: a path uuid is looked up in any case (api.md), but the replay of a
    key with the uuid in upper case was 422 IdempotencyKeyReused."""
    vm_uuid = create_running_vm(client)
    key = {"Idempotency-Key": "stop-in-any-case"}
    first = act(client, vm_uuid, "stop", headers=key)
    assert first.status_code == 202, first.text
    wait_job(client, first.json()["job_uuid"])  # the worker appends no more meanwhile
    head = services.commands.head_position()
    again = act(client, vm_uuid.upper(), "stop", headers=key)
    assert (again.status_code, again.json()) == (202, first.json())
    assert services.commands.head_position() == head
