"""An ``add_nics`` whose workers kept being lost is given up (no attempts left): it used to
fail keeping its NICs and their addresses for good, and raised no fence, so a lost worker's
late call could still add them on the node. Now the worker that gives up raises its fence on
every server a copy may be on, has the copy drop the NICs (a lost worker's call may have
landed), and fails the job giving them back, as a ``fence`` job does for a canceled
``add_nics`` (docs/jobs.md, "Removed servers"; service/jobs/takeovers.py). A server that
cannot be fenced leaves the VM its NICs. Worker A is lost in its ``reconfigure``, before or
after the node applied it; B, with no attempts left, gives the job up. No sleeps, both
backends."""

from __future__ import annotations

import pytest

from tests.builders import job
from tests.integration.test_canceled_jobs_fenced import taken_by_a_fence
from tests.integration.test_fencing import paused_in
from tests.integration.test_job_faults import rescuer
from tests.integration.test_reconfigure_faults import (
    change, claims, copy_macs, running_vm_with_a_network,
)


def giving_up(services):
    """Worker B, two leases later, with no attempts left for a job taken over."""
    b = rescuer(services, "b")
    b.max_attempts = 1
    return b


def lost_after_the_node_applied_it(services, monkeypatch, vm_uuid: str, meanwhile) -> None:
    """Worker A's ``reconfigure`` is applied on the node; then, before A records it,
    ``meanwhile`` runs, and A's next save is refused (the job is no longer its)."""
    original = services.fleet.reconfigure

    def applied_then_lost(*args, **kwargs):
        monkeypatch.setattr(services.fleet, "reconfigure", original)
        answer = original(*args, **kwargs)
        meanwhile()
        return answer

    monkeypatch.setattr(services.fleet, "reconfigure", applied_then_lost)
    assert services.worker.run_vm(vm_uuid)


@pytest.mark.parametrize("landed", [False, True], ids=["before-the-node", "after-the-node"])
def test_a_given_up_add_nics_fences_the_node_drops_its_nic_and_gives_it_back(
        services, monkeypatch, json_logs, landed):
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    add = change(services, vm_uuid, add=[network])
    [nic] = services.commands.load(vm_uuid).nic_list
    assert claims(services, network) == {nic["ip"]: vm_uuid}

    def meanwhile() -> None:
        assert copy_macs(services, vm_uuid, server_uuid) == ([nic["mac"]] if landed else [])
        assert giving_up(services).run_vm(vm_uuid)

    if landed:
        lost_after_the_node_applied_it(services, monkeypatch, vm_uuid, meanwhile)
    else:  # A resumes its call after B gave up: refused on the node
        assert paused_in(services, monkeypatch, "reconfigure", vm_uuid, meanwhile) == []
        assert taken_by_a_fence(json_logs, add)

    assert copy_macs(services, vm_uuid, server_uuid) == []
    assert services.commands.load(vm_uuid).nic_list == []
    assert claims(services, network) == {}
    given_up = job(services, add)
    assert given_up["execution"] == "failed"
    assert given_up["error"].startswith("gave up after 1 attempts"), given_up["error"]
    [fence] = [step for step in given_up["chain_results"] if step["name"] == "fence"]
    assert fence["result"]["server_uuid"] == server_uuid and fence["error"] is None


def test_a_given_up_add_nics_that_cannot_fence_the_node_keeps_its_nic(services, monkeypatch):
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    add = change(services, vm_uuid, add=[network])
    [nic] = services.commands.load(vm_uuid).nic_list

    def meanwhile() -> None:
        # the node cannot be reached: each attempt of B's fence step fails
        services.fleet.faults.inject("inventory", "fail", services.worker.step_attempts)
        assert giving_up(services).run_vm(vm_uuid)

    paused_in(services, monkeypatch, "reconfigure", vm_uuid, meanwhile)

    given_up = job(services, add)
    assert given_up["execution"] == "failed"
    assert "its NICs are kept" in given_up["error"], given_up["error"]
    # no fence went up, so A's call landed: the VM keeps its NIC and address, as the node
    assert copy_macs(services, vm_uuid, server_uuid) == [nic["mac"]]
    assert services.commands.load(vm_uuid).nic_list == [nic]
    assert claims(services, network) == {nic["ip"]: vm_uuid}
