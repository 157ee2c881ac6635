"""Agent reports older than what the log recorded, through the API (api.md ``PUT /vms`` and
``PUT /vms/{uuid}``, ``seq``; docs/jobs.md "Reports older than a job's step"): one
interleaving at a time, and the simulated agent reporting while jobs run."""

from __future__ import annotations

import threading

from service.jobs.compute.simulated import simulated_server_uuid
from tests.api.helpers import act_and_wait, create_vm, get_vm, history_types, wait_job

S = simulated_server_uuid(1)


def inventory(sent: dict) -> dict:
    return {"boot_id": sent["boot_id"], "generation": sent["generation"], "seq": sent["seq"],
            "vms": {vm: {"state": seen["state"]} for vm, seen in sent["vms"].items()}}


def test_an_inventory_taken_before_a_provision_and_put_after_it_changes_nothing(paused):
    created = create_vm(paused.http, server_uuid=S)
    sent = paused.services.fleet.report(S)  # taken: the VM is not on the node yet
    assert paused.run_jobs() == 1  # the provision records Provisioned, then succeeds
    put = paused.http.put("/vms", params={"server_uuid": S}, json=inventory(sent))
    assert put.status_code == 200, put.text
    assert put.json()["changed"] == {}
    assert get_vm(paused.http, created["vm_uuid"])["state"] == "running"
    assert "Quarantined" not in history_types(paused.http, created["vm_uuid"])


def _reported_stopped_then_started(paused, **body) -> tuple[str, dict]:
    """A VM on ``S`` stopped, the node's report taken then, and the VM started after it: the
    VM's uuid and the report, now older than the start's step."""
    vm_uuid = create_vm(paused.http, server_uuid=S, **body)["vm_uuid"]
    paused.run_jobs()
    assert paused.http.post(f"/vms/{vm_uuid}", params={"action": "stop"}).status_code == 202
    paused.run_jobs()
    sent = paused.services.fleet.report(S)
    assert paused.http.post(f"/vms/{vm_uuid}", params={"action": "start"}).status_code == 202
    paused.run_jobs()
    return vm_uuid, sent


def test_a_put_vm_taken_while_stopped_and_put_after_a_start_changes_nothing(paused):
    vm_uuid, sent = _reported_stopped_then_started(
        paused, persistence={"preset": "persistent", "guest_shutdown": "destroy"})
    put = paused.http.put(f"/vms/{vm_uuid}", json={
        "state": "stopped", "server_uuid": S, "boot_id": sent["boot_id"],
        "generation": sent["generation"], "seq": sent["seq"]})
    assert put.status_code == 200, put.text
    assert put.json()["state"] == "running"
    assert paused.run_jobs() == 0  # no destroy was queued
    bad = paused.http.put(f"/vms/{vm_uuid}", json={
        "state": "stopped", "server_uuid": S, "boot_id": sent["boot_id"],
        "generation": sent["generation"] + 1, "seq": "7"})
    assert bad.status_code == 409, bad.text  # a number, not a string of one


def test_the_simulated_agent_reporting_while_vms_are_made_and_started_never_misreads_a_job(
        client, services):
    """The tester's race: a thread sends the simulated agent's report again and again while
    VMs pinned to its server are made, stopped and started. No report may quarantine,
    destroy or stop a VM that runs on the node."""
    done = threading.Event()
    errors: list[str] = []
    reports = 0

    def reporter() -> None:
        nonlocal reports
        while not done.is_set():
            answer = client.post(f"/sim/servers/{S}", params={"action": "report"})
            if answer.status_code != 200:
                errors.append(answer.text)
            reports += 1

    thread = threading.Thread(target=reporter, daemon=True)
    thread.start()
    try:
        vms = []
        for _ in range(12):
            created = create_vm(client, server_uuid=S, ram=128, brand="bhyve",
                                persistence={"preset": "persistent",
                                             "guest_shutdown": "destroy"})
            vms.append(created["vm_uuid"])
            assert wait_job(client, created["job_uuid"])["execution"] == "succeeded"
        for vm_uuid in vms[:6]:
            assert act_and_wait(client, vm_uuid, "stop")["execution"] == "succeeded"
            assert act_and_wait(client, vm_uuid, "start")["execution"] == "succeeded"
    finally:
        done.set()
        thread.join(timeout=30)
    assert not errors and reports > 0
    for vm_uuid in vms:
        vm = get_vm(client, vm_uuid)
        assert vm["state"] == "running", (vm_uuid, history_types(client, vm_uuid))
        assert services.fleet.running_copies(vm_uuid) == 1
        assert not {"Quarantined", "Destroyed"} & set(history_types(client, vm_uuid))


def test_a_vm_agent_put_vm_with_an_older_seq_changes_nothing(paused):
    vm_uuid, sent = _reported_stopped_then_started(paused)
    put = paused.http.put(f"/vms/{vm_uuid}", json={
        "uuid": vm_uuid, "state": "stopped", "server_uuid": S, "seq": sent["seq"]})
    assert put.status_code == 200, put.text
    assert put.json()["state"] == "running"
