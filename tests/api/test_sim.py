"""The simulated fleet's HTTP control surface under ``/sim/`` (docs/simulation.md)."""

from __future__ import annotations

import time
import uuid

from tests.api.helpers import (
    assert_error, create_running_vm, create_vm, error_fields, get_vm, wait_job,
)
from tests.integration.test_quarantine import later
from tests.waiting import wait_until


def servers_by_uuid(client) -> dict[str, dict]:
    response = client.get("/sim")
    assert response.status_code == 200, response.text
    return {server["uuid"]: server for server in response.json()["servers"]}


def test_sim_shows_the_servers_with_their_vm_copies_faults_latency_and_pause(client) -> None:
    vm_uuid = create_running_vm(client)
    world = client.get("/sim").json()
    assert [s["hostname"] for s in world["servers"]] == ["sim0000", "sim0001", "sim0002",
                                                        "sim0003"]
    assert {s["status"] for s in world["servers"]} == {"running"}
    server_uuid = get_vm(client, vm_uuid)["server_uuid"]
    copies = {s["uuid"]: [c["vm_uuid"] for c in s["vms"]] for s in world["servers"]}
    assert copies[server_uuid] == [vm_uuid]
    assert world["faults"] == [] and world["workers_paused"] is False
    assert set(world["latency_s"].values()) == {0.0}
    assert_error(client.get("/sim", params={"colour": "blue"}), 409, "ValidationFailed")


def test_one_injected_failure_is_recorded_and_the_step_is_tried_again(client) -> None:
    client.post("/sim/faults", json={"operation": "ensure_state", "count": 1})
    job = wait_job(client, create_vm(client)["job_uuid"])
    assert job["execution"] == "succeeded"
    steps = [(c["name"], c["error"] is None) for c in job["chain_results"]]
    assert steps[-2:] == [("ensure_state", False), ("ensure_state", True)]


def test_injected_failures_of_every_attempt_fail_the_job_and_it_records_each_step(
        client) -> None:
    injected = client.post("/sim/faults", json={"operation": "ensure_state", "count": 3})
    assert injected.status_code == 200, injected.text
    assert len(injected.json()["faults"]) == 1
    failed = create_vm(client)
    job = wait_job(client, failed["job_uuid"])
    assert job["execution"] == "failed"
    attempts = [c for c in job["chain_results"] if c["name"] == "ensure_state"]
    assert len(attempts) == 3  # the settings' job_step_attempts, each recorded
    assert all("injected failure" in c["error"] for c in attempts)
    assert job["chain_results"][-1]["name"] == "ensure_state"
    assert get_vm(client, failed["vm_uuid"])["state"] == "failed"
    # the fault was used up: the next provision succeeds
    assert wait_job(client, create_vm(client)["job_uuid"])["execution"] == "succeeded"
    bad = client.post("/sim/faults", json={"operation": "explode"})
    assert error_fields(assert_error(bad, 409, "ValidationFailed")) == {"operation": "Invalid"}


def test_latency_is_set_per_operation_or_for_all_and_clearing_faults_removes_it(client) -> None:
    one = client.put("/sim/latency", json={"seconds": 0.5, "operation": "unregister"})
    assert one.json()["latency_s"]["unregister"] == 0.5
    assert one.json()["latency_s"]["ensure_state"] == 0.0
    every = client.put("/sim/latency", json={"seconds": 0.25}).json()["latency_s"]
    assert set(every.values()) == {0.25}  # every operation, unregister's own value too
    client.post("/sim/faults", json={"operation": "unregister", "count": 3})
    client.post("/sim/workers", params={"action": "pause"})
    cleared = client.delete("/sim/faults").json()
    assert cleared["faults"] == [] and cleared["workers_paused"] is False
    assert set(cleared["latency_s"].values()) == {0.0}
    bad = client.put("/sim/latency", json={"seconds": -1})
    assert error_fields(assert_error(bad, 409, "ValidationFailed")) == {"seconds": "Invalid"}


def test_a_latency_without_operation_replaces_every_operations_own(client) -> None:
    # found by a tester: {"seconds": 0} left ensure_state's 6 s, so each provision still
    # waited 6 s after the operator had set every latency to 0
    slow = client.put("/sim/latency", json={"seconds": 6, "operation": "ensure_state"})
    assert slow.json()["latency_s"]["ensure_state"] == 6
    cleared = client.put("/sim/latency", json={"seconds": 0})
    assert cleared.status_code == 200, cleared.text
    assert set(cleared.json()["latency_s"].values()) == {0.0}
    assert set(client.get("/sim").json()["latency_s"].values()) == {0.0}
    started = time.monotonic()
    assert wait_job(client, create_vm(client)["job_uuid"])["execution"] == "succeeded"
    assert time.monotonic() - started < 5  # ensure_state did not wait its old 6 s
    # an operation's own latency set afterwards still counts, over the fleet-wide one
    again = client.put("/sim/latency", json={"seconds": 0.5, "operation": "inventory"})
    assert again.json()["latency_s"] == {"ensure_registered": 0.0, "ensure_state": 0.0,
                                         "unregister": 0.0, "inventory": 0.5,
                                         "reconfigure": 0.0}


def test_paused_workers_claim_no_job_until_resumed(client, services) -> None:
    assert client.post("/sim/workers", params={"action": "pause"}).json()["workers_paused"]
    created = create_vm(client)
    assert services.worker.run_pending() == 0
    waited = client.get(f"/jobs/{created['job_uuid']}/wait", params={"timeout": 0}).json()
    assert waited["execution"] == "queued"
    assert get_vm(client, created["vm_uuid"])["state"] == "provisioning"
    assert client.post("/sim/workers", params={"action": "resume"}).json()[
        "workers_paused"] is False
    assert wait_job(client, created["job_uuid"])["execution"] == "succeeded"
    bad = client.post("/sim/workers", params={"action": "sleep"})
    assert error_fields(assert_error(bad, 409, "ValidationFailed")) == {"action": "Invalid"}


def test_paused_workers_still_quarantine_a_vm_stuck_in_provisioning(client, services) -> None:
    # pausing is a fault of the workers' claiming: the stuck check, the operator's safety
    # net for a VM whose job does not run, goes on (docs/simulation.md)
    services.worker.periodic_s = 0.02  # the check every pass of the background worker
    assert client.post("/sim/workers", params={"action": "pause"}).json()["workers_paused"]
    created = create_vm(client)
    later(services, services.quarantine.stuck.thresholds.transient_s + 1)
    vm = wait_until(lambda: (vm := get_vm(client, created["vm_uuid"]))["state"]
                    == "quarantined" and vm, "the stuck check to quarantine the VM", timeout=10)
    assert "stuck in provisioning" in vm["quarantine"]["reason"], vm
    assert wait_job(client, created["job_uuid"])["execution"] == "canceled"
    assert client.get("/sim").json()["workers_paused"] is True


def test_server_happenings_reboot_remove_restore_and_restart_agent(client) -> None:
    vm_uuid = create_running_vm(client)
    server_uuid = get_vm(client, vm_uuid)["server_uuid"]
    before = servers_by_uuid(client)[server_uuid]

    def happen(action: str) -> dict:
        response = client.post(f"/sim/servers/{server_uuid}", params={"action": action})
        assert response.status_code == 200, response.text
        return {s["uuid"]: s for s in response.json()["servers"]}[server_uuid]

    assert [c["known"] for c in happen("restart_agent")["vms"]] == [0]
    assert happen("remove")["status"] == "removed"
    assert happen("restore")["status"] == "running"
    rebooted = happen("reboot")
    assert rebooted["boot_id"] != before["boot_id"] and rebooted["vms"] == []
    assert_error(client.post(f"/sim/servers/{uuid.uuid4()}", params={"action": "reboot"}),
                 404, "ResourceNotFound")
    bad = client.post(f"/sim/servers/{server_uuid}", params={"action": "explode"})
    assert error_fields(assert_error(bad, 409, "ValidationFailed")) == {"action": "Invalid"}


def test_a_guest_shutdown_powers_the_guest_off(client) -> None:
    vm_uuid = create_running_vm(client)
    response = client.post(f"/sim/vms/{vm_uuid}", params={"action": "shutdown"})
    assert response.status_code == 200, response.text
    assert [copy["state"] for copy in response.json()["copies"]] == ["stopped"]
    bad = client.post(f"/sim/vms/{vm_uuid}", params={"action": "explode"})
    assert error_fields(assert_error(bad, 409, "ValidationFailed")) == {"action": "Invalid"}


def test_a_guest_happening_of_no_vm_in_the_fleet_is_not_found(client) -> None:
    # found by a tester: POST /sim/vms/notauuid?action=crash answered 200
    body = assert_error(client.post("/sim/vms/notauuid", params={"action": "crash"}), 404,
                        "ResourceNotFound")
    assert "Invalid UUID" in body["message"]
    unknown = str(uuid.uuid4())
    assert_error(client.post(f"/sim/vms/{unknown}", params={"action": "shutdown"}), 404,
                 "ResourceNotFound")
    vm_uuid = create_running_vm(client)
    shouting = client.post(f"/sim/vms/{vm_uuid.upper()}", params={"action": "shutdown"})
    assert shouting.status_code == 200, shouting.text


def test_the_simulations_numbers_are_json_numbers(client) -> None:
    # found by a tester: PUT /sim/latency {"seconds": "1"} delayed every operation a second
    before = client.get("/sim").json()
    for path, body, field in (("/sim/latency", {"seconds": "1"}, "seconds"),
                              ("/sim/faults", {"operation": "ensure_state", "count": "2"},
                               "count")):
        refused = assert_error(client.request("PUT" if "latency" in path else "POST", path,
                                              json=body), 409, "ValidationFailed")
        assert error_fields(refused) == {field: "Invalid"}, refused
    assert client.get("/sim").json() == before
    assert client.put("/sim/latency", json={"seconds": 0}).status_code == 200
