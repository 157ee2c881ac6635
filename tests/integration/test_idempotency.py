"""Idempotency-Key and client-chosen uuids (api.md, "Concurrency and idempotency")."""

from __future__ import annotations

import threading

import pytest

from domain.vm import Vm, make_cause
from service.commands.application import Accepted, VmSpec
from service.commands.idempotency import IdempotencyKey, IdempotencyKeyReusedError

OWNER = "930896af-bf8c-48d4-885c-6573a94b1853"
BODY = {"owner_uuid": OWNER, "brand": "bhyve", "ram": 256}


def _created_events(services) -> list:
    notifications = services.app.recorder.select_notifications(0, 1_000_000)
    return [e for e in map(services.app.mapper.to_domain_event, notifications)
            if isinstance(e, Vm.Created)]


def test_a_create_whose_response_is_lost_and_retried_three_times_makes_one_vm_and_one_job(
        client, services):
    responses = [client.post("/vms", json=BODY, headers={"Idempotency-Key": "create-1"})
                 for _ in range(4)]  # the first, then three retries after "lost" responses
    assert {r.status_code for r in responses} == {202}
    assert len({r.text for r in responses}) == 1
    assert {r.headers["etag"] for r in responses} == {responses[0].headers["etag"]}
    assert len(_created_events(services)) == 1
    vm_uuid = responses[0].json()["vm_uuid"]
    jobs = client.get(f"/vms/{vm_uuid}/jobs").json()
    assert [j["uuid"] for j in jobs] == [responses[0].json()["job_uuid"]]


def _settled(client, response) -> None:
    """Wait until the job a command queued has ended, so the log stops moving."""
    job = client.get(f"/jobs/{response.json()['job_uuid']}/wait?timeout=10").json()
    assert job["execution"] in ("succeeded", "failed")


def test_a_key_reused_with_another_body_is_refused_and_appends_nothing(client, services):
    first = client.post("/vms", json=BODY, headers={"Idempotency-Key": "k"})
    _settled(client, first)
    head = services.commands.head_position()
    refused = client.post("/vms", json={**BODY, "ram": 512}, headers={"Idempotency-Key": "k"})
    assert refused.status_code == 422
    assert refused.json()["code"] == "IdempotencyKeyReused"
    assert services.commands.head_position() == head


def test_a_repeated_action_with_the_same_key_returns_the_first_job_and_appends_nothing(
        client, services):
    created = client.post("/vms", json=BODY)
    _settled(client, created)
    vm_uuid = created.json()["vm_uuid"]
    first = client.post(f"/vms/{vm_uuid}?action=stop", headers={"Idempotency-Key": "stop-1"})
    _settled(client, first)
    head = services.commands.head_position()
    again = client.post(f"/vms/{vm_uuid}?action=stop", headers={"Idempotency-Key": "stop-1"})
    assert again.status_code == 202
    assert again.json() == first.json()
    assert services.commands.head_position() == head


def test_two_requests_racing_with_the_same_key_produce_one_outcome(services):
    key = IdempotencyKey("anonymous", "race", "same-request")
    spec = VmSpec(owner_uuid=OWNER, brand="bhyve", ram=256)
    barrier = threading.Barrier(8)
    outcomes = []

    def create() -> None:
        barrier.wait()
        outcomes.append(services.commands.create_vm(spec, cause=make_cause(), idempotency=key))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({(o.vm_uuid, o.job_uuid) for o in outcomes}) == 1
    assert len(outcomes) == 8
    assert len(_created_events(services)) == 1


def test_a_key_is_stored_only_with_the_events_of_its_command(services):
    """A save that fails (a version conflict) leaves no key behind: same transaction."""
    vm_uuid = services.commands.create_vm(
        VmSpec(owner_uuid=OWNER, brand="bhyve", ram=256), cause=make_cause()).vm_uuid
    stale = services.commands.load(vm_uuid)
    winner = services.commands.load(vm_uuid)
    winner.update_metadata({"alias": "winner"}, cause=make_cause())
    services.app.save(winner)
    stale.update_metadata({"alias": "loser"}, cause=make_cause())
    key = IdempotencyKey("anonymous", "lost", "fingerprint")
    # the outcome a command stores with its key (an Accepted), not the VM: a VM holds
    # datetimes (state_since) that no key's JSON column takes
    record = services.commands.keys.record(key, 202, Accepted(vm_uuid, None, stale.version, None))
    with pytest.raises(Exception, match="(?i)unique|duplicate|integrity"):
        services.app.save(stale, idempotency=record, idempotency_expired_before=0)
    assert services.commands.keys.find(key) is None


def test_keys_expire_after_their_time_to_live(services):
    now = [1_000_000.0]
    services.commands.keys.clock = lambda: now[0]
    key = IdempotencyKey("anonymous", "old", "request-a")
    spec = VmSpec(owner_uuid=OWNER, brand="bhyve", ram=256)
    first = services.commands.create_vm(spec, cause=make_cause(), idempotency=key)
    now[0] += services.commands.keys.ttl_s - 1
    replayed = services.commands.create_vm(spec, cause=make_cause(), idempotency=key)
    assert (replayed.vm_uuid, replayed.job_uuid, replayed.position) == (
        first.vm_uuid, first.job_uuid, None)  # the first outcome; nothing appended
    now[0] += 2  # past the time to live: the key names nothing any more
    assert services.commands.keys.find(key) is None
    second = services.commands.create_vm(spec, cause=make_cause(), idempotency=key)
    assert second.vm_uuid != first.vm_uuid
    reused = IdempotencyKey("anonymous", "old", "request-b")
    with pytest.raises(IdempotencyKeyReusedError):
        services.commands.create_vm(spec, cause=make_cause(), idempotency=reused)


def test_the_time_to_live_is_at_least_24_hours(settings):
    assert settings.idempotency_ttl_s >= 24 * 3600
    with pytest.raises(ValueError):
        type(settings)(database_url=settings.database_url, idempotency_ttl_s=3600)


def test_a_create_repeating_a_client_chosen_uuid_returns_the_first_result(client, services):
    vm_uuid = "11111111-2222-4333-8444-555555555555"
    first = client.post("/vms", json={**BODY, "uuid": vm_uuid})
    again = client.post("/vms", json={**BODY, "uuid": vm_uuid})
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert len(_created_events(services)) == 1


def test_a_create_reusing_a_uuid_with_another_body_is_a_duplicate(client, services):
    vm_uuid = "11111111-2222-4333-8444-666666666666"
    _settled(client, client.post("/vms", json={**BODY, "uuid": vm_uuid}))
    head = services.commands.head_position()
    clash = client.post("/vms", json={**BODY, "uuid": vm_uuid, "ram": 1024})
    assert clash.status_code == 409  # version 1, as VMAPI: ValidationFailed, code Duplicate
    assert clash.json()["errors"] == [
        {"field": "uuid", "code": "Duplicate", "message": "Already exists"}]
    assert services.commands.head_position() == head
