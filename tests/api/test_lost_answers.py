"""A tester's two findings over HTTP, as they were found (embedded serve, both backends): the
last attempt of a job step loses the compute node's answer after the node did the work
(``POST /sim/faults`` ``lose_response``), and the job used to record failure without asking
the node what it did (docs/jobs.md, "An answer lost on the last attempt")."""

from __future__ import annotations

from tests.api.helpers import (
    V2, act, act_and_wait, create_running_vm, get_vm, history_types, wait_job,
)
from tests.api.test_networks import make_network


def lose(client, operation: str, count: int = 3) -> None:
    response = client.post("/sim/faults", json={"operation": operation,
                                                "mode": "lose_response", "count": count})
    assert response.status_code == 200, response.text


def node_nics(services, client, vm_uuid: str) -> list[tuple[str, str]]:
    """The (MAC, IP) of every NIC the VM's copy on its server is configured with. The
    simulated node holds the NICs ``reconfigure`` gave it (``add_nics``), not those a
    provision made, so the tests give their VMs every NIC through ``add_nics``."""
    server_uuid = get_vm(client, vm_uuid)["server_uuid"]
    config = services.fleet.config(server_uuid, vm_uuid) or {}
    return sorted((nic["mac"], nic["ip"]) for nic in config.get("nics", []))


def add_nic(client, vm_uuid: str, network: dict) -> dict:
    return act_and_wait(client, vm_uuid, "add_nics", headers=V2,
                        json={"networks": [network["uuid"]]})


def test_a_failed_add_nics_gives_no_address_that_a_node_still_holds_to_the_next_vm(
        client, services) -> None:
    network = make_network(client)
    vm_uuid = create_running_vm(client)
    assert add_nic(client, vm_uuid, network)["execution"] == "succeeded"
    [kept] = get_vm(client, vm_uuid)["nics"]
    assert node_nics(services, client, vm_uuid) == [(kept["mac"], kept["ip"])]
    lose(client, "reconfigure")
    added = act(client, vm_uuid, "add_nics", headers=V2, json={"networks": [network["uuid"]]})
    assert added.status_code == 202, added.text
    failed = wait_job(client, added.json()["job_uuid"])
    assert failed["execution"] == "failed"
    assert "its response was lost after the work" in failed["error"]
    assert history_types(client, vm_uuid)[-3:] == ["JobStepRecorded", "NicsRemoved",
                                                   "JobFailed"]
    # the node dropped the NIC whose address the log gave back, and kept the one before
    assert get_vm(client, vm_uuid)["nics"] == [kept]
    assert node_nics(services, client, vm_uuid) == [(kept["mac"], kept["ip"])]
    # so the next VM that gets that address is the only one holding it on a node
    other = create_running_vm(client)
    assert add_nic(client, other, network)["execution"] == "succeeded"
    [given] = get_vm(client, other)["nics"]
    held = [ip for copy_vm in (vm_uuid, other) for _, ip in node_nics(services, client, copy_vm)]
    assert sorted(held) == sorted([kept["ip"], given["ip"]])
    assert held.count(given["ip"]) == 1


def test_a_stop_whose_answers_were_lost_is_stopped_in_the_log_and_a_report_destroys_nothing(
        client) -> None:
    vm_uuid = create_running_vm(
        client, persistence={"preset": "persistent", "guest_shutdown": "destroy"})
    server_uuid = get_vm(client, vm_uuid)["server_uuid"]
    lose(client, "ensure_state")
    stopped = act(client, vm_uuid, "stop", headers=V2)
    assert stopped.status_code == 202, stopped.text
    assert wait_job(client, stopped.json()["job_uuid"])["execution"] == "succeeded"
    assert get_vm(client, vm_uuid)["state"] == "stopped"

    reported = client.post(f"/sim/servers/{server_uuid}", params={"action": "report"})
    assert reported.status_code == 200, reported.text
    assert get_vm(client, vm_uuid)["state"] == "stopped"
    assert "Destroyed" not in history_types(client, vm_uuid)
    # and a start boots it again
    started = act(client, vm_uuid, "start", headers=V2)
    assert wait_job(client, started.json()["job_uuid"])["execution"] == "succeeded"
    assert get_vm(client, vm_uuid)["state"] == "running"
