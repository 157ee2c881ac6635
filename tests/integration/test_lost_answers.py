"""A job step whose every attempt failed, one of them after the node did the work (its answer
lost: the simulator's ``lose_response``), is not recorded as "did not happen": before the job
fails, the node is asked, under the job's fence, what it did, and the job ends as a takeover
would (docs/jobs.md, "An answer lost on the last attempt"; service/jobs/takeovers.py
``settle_unknown``). A tester found both: an ``add_nics`` failed giving its address back while
the node kept the NIC (the next VM got the same IP), and a stop, start, reboot or update left
the log contradicting the host (a stop's report then destroyed a VM as a guest shutdown).
No sleeps, both backends."""

from __future__ import annotations

import pytest

from domain.states import Action
from service.jobs.compute.driver import OutcomeUnknownError
from service.jobs.compute.simulated import simulated_server_uuid
from tests.builders import act, create, event_names, job, settle
from tests.integration.test_job_faults import WorkerDied, dies_once, rescuer
from tests.integration.test_reconfigure_faults import (
    change, claims, copy_macs, running_vm_with_a_network,
)
from tests.integration.test_stale_reports import apply, pinned, taken

S = simulated_server_uuid(1)


def lost_every_time(services, operation: str, *, failed_first: bool = False) -> None:
    """The step's attempts all fail, the last (or every one) after the node did the work."""
    attempts = services.worker.step_attempts
    if failed_first:
        services.fleet.faults.inject(operation, "fail", attempts - 1)
        services.fleet.faults.inject(operation, "lose_response", 1)
    else:
        services.fleet.faults.inject(operation, "lose_response", attempts)


# a guest shutdown destroys it: a report taken for one is seen at once
DESTROYED_ON_SHUTDOWN = {"preset": "persistent", "guest_shutdown": "destroy"}


def waiting_stop(services, persistence: dict | None = None) -> tuple[str, str]:
    """``(vm_uuid, job_uuid)``: a running VM on ``S`` whose stop lost every answer after the
    node stopped it, and whose node could not be asked then: the job waits (row L4)."""
    vm_uuid = pinned(services, persistence) if persistence else pinned(services)
    settle(services)
    lost_every_time(services, "ensure_state")
    services.fleet.faults.inject("inventory", "fail", 1)
    stop = act(services, vm_uuid, Action.STOP).job_uuid
    settle(services)
    assert job(services, stop)["execution"] == "running"
    return vm_uuid, stop


def steps(done: dict) -> list[tuple[str, bool]]:
    return [(step["name"], step["error"] is None) for step in done["chain_results"]]


# -- add_nics: the NIC dropped on the node before its address is given back ------------------


@pytest.mark.parametrize("failed_first", [False, True], ids=["lost-x3", "failed-x2-lost"])
def test_an_add_nics_whose_last_answer_was_lost_drops_the_nic_before_giving_its_address_back(
        services, failed_first):
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    lost_every_time(services, "reconfigure", failed_first=failed_first)
    add = change(services, vm_uuid, add=[network])
    [nic] = services.commands.load(vm_uuid).nic_list
    settle(services)

    failed = job(services, add)
    assert failed["execution"] == "failed"
    assert "its response was lost after the work" in failed["error"], failed["error"]
    assert [name for name, _ in steps(failed)].count("fence") == 1
    # the node no longer has the NIC the log gave back, so its address is free for good
    assert copy_macs(services, vm_uuid, server_uuid) == []
    assert services.commands.load(vm_uuid).nic_list == []
    assert claims(services, network) == {}
    # the next VM on the network gets that address, and no node has it twice
    other = create(services)
    settle(services)
    again = change(services, other.vm_uuid, add=[network])
    settle(services)
    assert job(services, again)["execution"] == "succeeded"
    assert claims(services, network) == {nic["ip"]: other.vm_uuid}
    assert copy_macs(services, vm_uuid, server_uuid) == []


def test_an_add_nics_whose_answer_was_lost_and_whose_node_cannot_be_asked_keeps_its_nic(
        services):
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    lost_every_time(services, "reconfigure")
    # the node answers nothing more: each attempt of the fence step (raise_fence) fails
    services.fleet.faults.inject("inventory", "fail", services.worker.step_attempts)
    add = change(services, vm_uuid, add=[network])
    [nic] = services.commands.load(vm_uuid).nic_list
    settle(services)

    failed = job(services, add)
    assert failed["execution"] == "failed"
    assert "its NICs are kept" in failed["error"], failed["error"]
    assert copy_macs(services, vm_uuid, server_uuid) == [nic["mac"]]
    assert services.commands.load(vm_uuid).nic_list == [nic]
    assert claims(services, network) == {nic["ip"]: vm_uuid}


# -- start, stop, reboot: the effect the node reports is adopted -----------------------------


def test_a_stop_whose_last_answer_was_lost_is_recorded_and_a_report_is_no_guest_shutdown(
        services):
    vm_uuid = pinned(services, {"preset": "persistent", "guest_shutdown": "destroy"})
    settle(services)
    lost_every_time(services, "ensure_state")
    stop = act(services, vm_uuid, Action.STOP).job_uuid
    settle(services)

    done = job(services, stop)
    assert done["execution"] == "succeeded", done
    assert steps(done)[-2:] == [("ensure_state", False), ("reconcile", True)]
    assert done["chain_results"][-1]["result"]["state"] == "stopped"
    assert services.commands.load(vm_uuid).state == "stopped"
    assert services.fleet.copies(vm_uuid)[0]["state"] == "stopped"
    # the agent's report says what the log says: no guest shutdown, nothing destroyed
    assert apply(services, taken(services)) == {}
    assert services.commands.load(vm_uuid).state == "stopped"
    assert "Destroyed" not in event_names(services, vm_uuid)
    # a start then boots it
    start = act(services, vm_uuid, Action.START).job_uuid
    settle(services)
    assert job(services, start)["execution"] == "succeeded"
    assert services.fleet.copies(vm_uuid)[0]["state"] == "running"


def test_a_start_whose_last_answer_was_lost_is_recorded_started(services):
    vm_uuid = pinned(services)
    settle(services)
    act(services, vm_uuid, Action.STOP)
    settle(services)
    lost_every_time(services, "ensure_state", failed_first=True)
    start = act(services, vm_uuid, Action.START).job_uuid
    settle(services)

    done = job(services, start)
    assert done["execution"] == "succeeded", done
    assert steps(done)[-1] == ("reconcile", True)
    assert done["chain_results"][-1]["result"]["begun_by_this_job"] is True
    assert services.commands.load(vm_uuid).state == "running"
    assert services.fleet.boots(vm_uuid) == 2  # the provision's and this start's, once
    assert apply(services, taken(services)) == {}


def test_a_reboot_whose_last_answer_was_lost_is_recorded_rebooted_once(services):
    vm_uuid = pinned(services)
    settle(services)
    lost_every_time(services, "ensure_state")
    reboot = act(services, vm_uuid, Action.REBOOT).job_uuid
    settle(services)

    done = job(services, reboot)
    assert done["execution"] == "succeeded", done
    assert event_names(services, vm_uuid).count("Rebooted") == 1
    assert services.fleet.boots(vm_uuid) == 2


def test_a_stop_whose_answer_was_lost_and_whose_node_cannot_be_asked_waits_for_it(services):
    """Nothing is decided while the node cannot say what it did: the job waits, holding the
    ticket (a report changes nothing meanwhile), and the next claim asks again."""
    vm_uuid, stop = waiting_stop(services, DESTROYED_ON_SHUTDOWN)

    waiting = job(services, stop)
    assert waiting["execution"] == "running", waiting
    assert waiting["chain_results"][-1]["result"] == {"waiting_for": [S]}
    assert services.commands.load(vm_uuid).state == "running"
    assert apply(services, taken(services)) == {}  # the job holds the ticket
    assert "Destroyed" not in event_names(services, vm_uuid)

    settle_later = rescuer(services)
    assert settle_later.run_vm(vm_uuid)
    done = job(services, stop)
    assert done["execution"] == "succeeded", done
    assert services.commands.load(vm_uuid).state == "stopped"
    assert apply(services, taken(services)) == {}


# -- update: the node set back to what the log says ------------------------------------------


def test_an_update_whose_last_answer_was_lost_sets_the_node_back_and_fails(services):
    vm_uuid = pinned(services)
    settle(services)
    server_uuid = services.commands.load(vm_uuid).server_uuid
    lost_every_time(services, "reconfigure")
    update = act(services, vm_uuid, Action.UPDATE, args={"alias": "web"}).job_uuid
    settle(services)

    failed = job(services, update)
    assert failed["execution"] == "failed"
    assert "MetadataUpdated" not in event_names(services, vm_uuid)
    assert services.fleet.config(server_uuid, vm_uuid).get("alias") is None


# -- provision: its boot adopted ------------------------------------------------------------


def test_a_provision_whose_boot_answer_was_lost_is_provisioned_with_one_boot(services):
    services.fleet.faults.inject("ensure_state", "lose_response", services.worker.step_attempts)
    accepted = create(services)
    settle(services)

    done = job(services, accepted.job_uuid)
    assert done["execution"] == "succeeded", done
    vm = services.commands.load(accepted.vm_uuid)
    assert vm.state == "running"
    assert services.fleet.boots(accepted.vm_uuid) == 1


def test_a_remove_nics_whose_last_answer_was_lost_sets_the_nic_back_and_keeps_it(services):
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    change(services, vm_uuid, add=[network])
    settle(services)
    [nic] = services.commands.load(vm_uuid).nic_list
    lost_every_time(services, "reconfigure")
    remove = change(services, vm_uuid, remove=[nic["mac"]])
    settle(services)

    failed = job(services, remove)
    assert failed["execution"] == "failed"
    # the log keeps the NIC and its address, and so does the node again
    assert copy_macs(services, vm_uuid, server_uuid) == [nic["mac"]]
    assert services.commands.load(vm_uuid).nic_list == [nic]
    assert claims(services, network) == {nic["ip"]: vm_uuid}


# -- destroy: a removal that took place is adopted --------------------------------------------


def test_a_destroy_whose_last_answer_was_lost_is_recorded_destroyed(services):
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    change(services, vm_uuid, add=[network])
    settle(services)
    lost_every_time(services, "unregister")
    destroy = act(services, vm_uuid, Action.DESTROY).job_uuid
    settle(services)

    done = job(services, destroy)
    assert done["execution"] == "succeeded", done
    assert steps(done)[-1] == ("reconcile", True)
    assert services.commands.load(vm_uuid).state == "destroyed"
    assert services.fleet.copies(vm_uuid) == []
    assert claims(services, network) == {}


def test_a_stop_whose_answer_was_lost_before_the_node_stopped_it_fails_as_the_node_says(
        services, monkeypatch):
    """Lost on the way to the node: the VM still runs there, and the job fails as before,
    the node's answer (and its sequence number) recorded."""
    vm_uuid = pinned(services)
    settle(services)

    def lost_on_the_way(*args, **kwargs):
        raise OutcomeUnknownError("ensure_state timed out")

    monkeypatch.setattr(services.fleet, "ensure_state", lost_on_the_way)
    stop = act(services, vm_uuid, Action.STOP).job_uuid
    settle(services)

    failed = job(services, stop)
    assert failed["execution"] == "failed"
    [reconcile] = [step for step in failed["chain_results"] if step["name"] == "reconcile"]
    assert reconcile["result"]["state"] == "running"
    assert "NodeObserved" in event_names(services, vm_uuid)
    assert services.commands.load(vm_uuid).state == "running"
    assert apply(services, taken(services)) == {}


def test_a_provision_taken_over_whose_boot_answer_was_lost_is_provisioned_with_one_boot(
        services, monkeypatch):
    accepted = create(services)
    dies_once(monkeypatch, services.fleet, "ensure_state")  # registered, never booted
    with pytest.raises(WorkerDied):
        services.worker.run_vm(accepted.vm_uuid)
    services.fleet.faults.inject("ensure_state", "lose_response", services.worker.step_attempts)
    assert rescuer(services).run_vm(accepted.vm_uuid)

    done = job(services, accepted.job_uuid)
    assert done["execution"] == "succeeded", done
    assert services.commands.load(accepted.vm_uuid).state == "running"
    assert services.fleet.boots(accepted.vm_uuid) == 1


# -- what the node did stays unknown until it answers (a reviewer's findings) -----------------
