"""An update sent with ``If-Match`` while another update's job is queued or running is
``412`` naming that job, though the version matches (docs/api.md, "Contract: concurrency and
idempotency"; ``Vm.require_updates_applied``). A tester's reproduction: the version moved when
A's update job was queued, the tags only when it ran, so B read the current version beside
tags without A's key, its ``If-Match`` passed, and its whole-object replace wiped A's key;
under load sixteen clients with read / ``If-Match`` / retry-on-412 loops lost 30 of 32 keys.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.helpers import act, assert_error, create_running_vm, wait_job

CLIENTS = 8  # half the tester's sixteen: without the rule, every run lost keys so too


def _read(client: TestClient, vm_uuid: str) -> tuple[str, dict[str, Any]]:
    answer = client.get(f"/vms/{vm_uuid}")
    assert answer.status_code == 200, answer.text
    return answer.headers["etag"], answer.json()


def _update(client: TestClient, vm_uuid: str, etag: str | None, tags: dict[str, Any]):
    return act(client, vm_uuid, "update", json={"tags": tags},
               headers={"If-Match": etag} if etag is not None else None)


@pytest.fixture
def paused_vm(client) -> Iterator[str]:
    """A running VM tagged ``{"base": "1"}``, the job workers paused (no job runs until
    ``POST /sim/workers?action=resume``), resumed at the end."""
    vm_uuid = create_running_vm(client, tags={"base": "1"})
    assert client.post("/sim/workers?action=pause").status_code == 200
    yield vm_uuid
    client.post("/sim/workers?action=resume")


def test_the_second_if_match_update_behind_a_pending_one_is_412_and_nothing_is_lost(
        client, services, paused_vm):
    vm_uuid = paused_vm
    etag, _ = _read(client, vm_uuid)
    first = _update(client, vm_uuid, etag, {"base": "1", "a": "1"})  # client A
    assert first.status_code == 202, first.text
    a_job = first.json()["job_uuid"]

    etag, vm = _read(client, vm_uuid)  # client B: the current version, A's key not shown
    assert etag == first.headers["etag"] and vm["tags"] == {"base": "1"}
    assert a_job in vm["queued_job_uuids"]
    head = services.commands.head_position()
    refused = assert_error(_update(client, vm_uuid, etag, {"base": "1", "b": "1"}),
                           412, "PreconditionFailed")
    assert refused["pending_job_uuid"] == a_job
    assert refused["current_version"] == int(etag.strip('"'))
    assert f"update job {a_job} is queued" in refused["message"]
    assert f"GET /jobs/{a_job}/wait" in refused["message"]
    assert services.commands.head_position() == head  # nothing appended

    # B does as told: waits for A's job, reads again, and its update goes through
    assert client.post("/sim/workers?action=resume").status_code == 200
    assert wait_job(client, a_job)["execution"] == "succeeded"
    etag, vm = _read(client, vm_uuid)
    assert vm["tags"] == {"base": "1", "a": "1"}
    second = _update(client, vm_uuid, etag, {**vm["tags"], "b": "1"})
    assert second.status_code == 202, second.text
    assert wait_job(client, second.json()["job_uuid"])["execution"] == "succeeded"
    assert _read(client, vm_uuid)[1]["tags"] == {"base": "1", "a": "1", "b": "1"}


def test_a_repeat_of_the_pending_update_with_its_current_version_is_answered_its_job(
        client, services, paused_vm):
    """A repeat asks just what the last job will apply: answered that job, nothing appended
    (api.md's repeat rule), not refused; the version read before the first attempt is the
    ordinary 412 on the version."""
    vm_uuid = paused_vm
    before, _ = _read(client, vm_uuid)
    tags = {"base": "1", "a": "1"}
    first = _update(client, vm_uuid, before, tags)
    assert first.status_code == 202, first.text
    head = services.commands.head_position()
    repeat = _update(client, vm_uuid, first.headers["etag"], tags)
    assert repeat.status_code == 202, repeat.text
    assert repeat.json()["job_uuid"] == first.json()["job_uuid"]
    assert services.commands.head_position() == head
    stale = assert_error(_update(client, vm_uuid, before, tags), 412, "PreconditionFailed")
    assert "pending_job_uuid" not in stale  # another version: no pending job to name


def test_without_a_version_read_or_for_another_action_a_pending_update_refuses_nothing(
        client, paused_vm):
    """``*`` and no header claim no representation read: the last writer wins, as
    documented; other actions replace no alias, metadata or tags."""
    vm_uuid = paused_vm
    etag, _ = _read(client, vm_uuid)
    assert _update(client, vm_uuid, etag, {"a": "1"}).status_code == 202
    for etag in ("*", None):
        answer = _update(client, vm_uuid, etag, {"b": "1" if etag else "2"})
        assert answer.status_code == 202, answer.text
    etag, _ = _read(client, vm_uuid)
    stopped = act(client, vm_uuid, "stop", headers={"If-Match": etag})
    assert stopped.status_code == 202, stopped.text


def test_a_refusal_of_the_vms_state_comes_before_the_pending_update(client, paused_vm):
    """Reading again would not change a state's refusal: it is answered first."""
    vm_uuid = paused_vm
    etag, _ = _read(client, vm_uuid)
    assert _update(client, vm_uuid, etag, {"a": "1"}).status_code == 202
    assert client.delete(f"/vms/{vm_uuid}", headers={"Accept-Version": "~2"}).status_code == 202
    etag, _ = _read(client, vm_uuid)
    refused = act(client, vm_uuid, "update", json={"tags": {"b": "1"}},
                  headers={"If-Match": etag, "Accept-Version": "~2"})
    assert_error(refused, 409, "VmBeingDestroyed")


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_racing_clients_with_if_match_retry_loops_lose_no_key(client):
    """The tester's load, with the workers running: each client adds its own tag key with
    the textbook loop (read, send the tags with its key and ``If-Match``, on 412 wait for the
    job it names, if any, and start again); every key is there at the end."""
    vm_uuid = create_running_vm(client, tags={"base": "1"})
    start = threading.Barrier(CLIENTS)
    accepted: list[str] = []
    failures: list[str] = []

    def add_key(key: str) -> None:
        try:
            start.wait(timeout=30)
            for _attempt in range(200):
                etag, vm = _read(client, vm_uuid)
                answer = _update(client, vm_uuid, etag, {**vm["tags"], key: "1"})
                if answer.status_code == 202:
                    accepted.append(answer.json()["job_uuid"])
                    return
                assert_error(answer, 412, "PreconditionFailed")
                pending = answer.json().get("pending_job_uuid")
                if pending is not None:
                    wait_job(client, pending)
            failures.append(f"{key}: no update accepted in 200 attempts")
        except Exception as error:  # noqa: BLE001 - reported by the test's thread
            failures.append(f"{key}: {error!r}")

    keys = [f"k{n:02}" for n in range(CLIENTS)]
    threads = [threading.Thread(target=add_key, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    assert len(accepted) == CLIENTS
    assert all(wait_job(client, job)["execution"] == "succeeded" for job in accepted)
    assert _read(client, vm_uuid)[1]["tags"] == {"base": "1", **{key: "1" for key in keys}}
