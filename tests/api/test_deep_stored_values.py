"""A value nested far past ``json_input.MAX_DEPTH``, stored before the API refused it (an
update's ``context`` of 900 levels, which the parser took), is still read: loads of the VM
(from the process's cache too), its commands, its time travel, its pages and the job worker
walk it without recursing past Python's limit (found by a tester: every load of such a VM
raised RecursionError, so its commands answered 500 and no job of any VM ran again)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from domain.states import Action
from domain.vm import make_cause
from service.commands.versioning import NEWEST
from tests.api.helpers import create_running_vm, create_vm, get_vm, wait_job

LEVELS = 900


def deep() -> dict[str, Any]:
    value: Any = []
    for _ in range(LEVELS):
        value = [value]
    return {"a": value}


def test_a_vm_holding_a_deep_value_an_older_version_stored_still_serves(
        client, services) -> None:
    vm_uuid = create_running_vm(client)
    # appended as an older version did, past the API's check
    stored = services.commands.request_action(
        vm_uuid, Action.UPDATE, behaviour=NEWEST, cause=make_cause(),
        args={"alias": "deep"}, context=deep())
    assert wait_job(client, stored.job_uuid)["execution"] == "succeeded"
    for _ in range(2):  # the second from the process's cache
        assert services.commands.load(vm_uuid).alias == "deep"
    again = client.post(f"/vms/{vm_uuid}?action=update", json={"alias": "after"})
    assert again.status_code == 202, again.text
    assert wait_job(client, again.json()["job_uuid"])["execution"] == "succeeded"
    assert get_vm(client, vm_uuid)["alias"] == "after"
    assert client.get(f"/vms/{vm_uuid}", params={"version": stored.version}).status_code == 200
    assert client.get(f"/vms/{vm_uuid}/history").status_code == 200
    fragments = f"/console/fragments/vms/{vm_uuid}"
    for page in (fragments, f"{fragments}/state?version={stored.version}",
                 f"{fragments}/diff?from={stored.version - 1}&to={stored.version}"):
        assert client.get(page).status_code == 200, page
    # a snapshot of the VM holding it, and a load from that snapshot
    services.app.take_snapshot(UUID(vm_uuid), version=stored.version)
    assert services.commands.load(vm_uuid, stored.version).head_job["uuid"] == stored.job_uuid
    # and every other VM's jobs still run
    other = create_vm(client)
    assert wait_job(client, other["job_uuid"])["execution"] == "succeeded"
