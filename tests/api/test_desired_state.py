"""A job that failed withdraws what it asked for (docs/jobs.md, "The desired state"): a
``persistent`` VM whose stop (or destroy) failed still runs, is desired running, and is started
again after its host reboots, as a VM no one asked anything of is (an operator tester's
repro: it was left desired ``stopped``, and failed for good)."""

from __future__ import annotations

import pytest

from tests.api.helpers import act, create_running_vm, get_vm, history_types, wait_job
from tests.waiting import wait_until


def _reboot_and_report(client, server_uuid: str) -> dict:
    for action in ("reboot", "report"):
        response = client.post(f"/sim/servers/{server_uuid}", params={"action": action})
        assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("operation, ask", [
    ("ensure_state", lambda client, vm: act(client, vm, "stop")),
    ("unregister", lambda client, vm: client.delete(f"/vms/{vm}")),
], ids=["stop", "destroy"])
def test_a_vm_whose_stop_or_destroy_failed_is_restarted_after_its_host_reboots(
        client, operation, ask) -> None:
    vm_uuid, control = create_running_vm(client), create_running_vm(client)
    injected = client.post("/sim/faults", json={"operation": operation, "mode": "fail",
                                                "count": 3})
    assert injected.status_code == 200, injected.text
    asked = ask(client, vm_uuid)
    assert asked.status_code == 202, asked.text
    job = wait_job(client, asked.json()["job_uuid"])
    assert job["execution"] == "failed" and "injected failure" in job["error"], job
    vm = get_vm(client, vm_uuid)
    # the node did not do it: the VM runs, and what it runs for is still asked of it
    assert (vm["state"], vm["desired_state"]) == ("running", "running"), vm
    assert history_types(client, vm_uuid)[-1] == "DesiredStateSet"

    for uuid in (vm_uuid, control):
        _reboot_and_report(client, get_vm(client, uuid)["server_uuid"])

    def back(uuid: str) -> dict | None:
        found = get_vm(client, uuid)
        return found if found["state"] == "running" and found["active_job_uuid"] is None \
            else None
    for uuid in (control, vm_uuid):
        found = wait_until(lambda uuid=uuid: back(uuid), f"VM {uuid} started again",
                           timeout=15)
        assert found["desired_state"] == "running"
    assert history_types(client, vm_uuid).count("Started") == 1
