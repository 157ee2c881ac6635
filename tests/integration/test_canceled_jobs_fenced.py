"""A job that a command cancels while it runs makes no compute call that takes effect on the
node afterwards (docs/jobs.md, "A quarantine while a job runs"). A quarantine (the operator's,
the stuck check's) queues a ``fence`` job in its own save: its claim is newer than the
canceled one, and its first call raises the VM's fence above it on every server a copy may
be on, so the canceled worker's call is refused when it resumes. Only then does a canceled
``add_nics`` give back its NICs and their addresses, after asking the node to drop them
(its call may have landed before the fence went up). A v2 DELETE that destroys at once
queues one too: its servers are removed, but the node of a server an operator recorded
removed may still take a call that a worker began before. Each node keeps its own fences, so
a VM whose copy may be on two servers is fenced on both.

Worker A (``services.worker``) is paused in its compute call, before the call's work, by a
hook that runs the cancel and worker B meanwhile (``test_fencing.paused_in``); then A
resumes. No sleeps, both backends.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from domain.states import Action
from domain.vm import make_cause
from service.jobs.compute.driver import Fence, FencedOffError
from tests.builders import act, job
from tests.integration.test_agents import report
from tests.integration.test_agents import running_vm as running_vm_of_agents
from tests.integration.test_fencing import paused_in
from tests.integration.test_job_faults import copies, rescuer, state_events
from tests.integration.test_quarantine import later
from tests.integration.test_reconfigure_faults import (
    change,
    claims,
    copy_macs,
    running_vm_with_a_network,
)
from tests.integration.test_takeovers import running_vm


def by_the_operator(services, vm_uuid: str) -> None:
    services.quarantine.quarantine(vm_uuid, "disk errors", cause=make_cause("operator"))


def by_the_stuck_check(services, vm_uuid: str) -> None:
    services.projections.catch_up()
    later(services, services.quarantine.stuck.thresholds.job_s + 1)  # A's job runs too long
    services.worker.periodic()


QUARANTINES: dict[str, Callable[..., None]] = {
    "operator": by_the_operator, "stuck-check": by_the_stuck_check}


def worker_b(services):
    """Another worker, on a clock two leases later, with the service's driver (removals an
    operator recorded refused, as the worker's)."""
    b = rescuer(services, "b")
    b.driver = services.worker.driver
    return b


def fence_jobs(services, vm_uuid: str) -> list[dict]:
    """The VM's ``fence`` jobs, oldest first."""
    services.projections.catch_up()
    jobs, _ = services.jobs.newest_of_vm(vm_uuid, 50)
    return [found for found in reversed(jobs) if found["name"] == "fence"]


def taken_by_a_fence(json_logs, job_uuid: str) -> bool:
    """Whether worker A logged its job taken from it by a refused fence."""
    return any(line.get("job_uuid") == job_uuid and "was taken from" in line["message"]
               and "fenced off" in line["message"] for line in json_logs())


@pytest.mark.parametrize("quarantine", QUARANTINES.values(), ids=QUARANTINES.keys())
def test_a_running_add_nics_a_quarantine_cancels_is_fenced_off_and_gives_its_nic_back(
        services, monkeypatch, json_logs, quarantine):
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    add = change(services, vm_uuid, add=[network])
    [nic] = services.commands.load(vm_uuid).nic_list  # recorded, its address claimed
    assert claims(services, network) == {nic["ip"]: vm_uuid}
    services.projections.catch_up()

    def meanwhile() -> None:
        quarantine(services, vm_uuid)
        assert services.commands.load(vm_uuid).state == "quarantined"
        worker_b(services).run_vm(vm_uuid)  # the fence job

    assert paused_in(services, monkeypatch, "reconfigure", vm_uuid, meanwhile) == []

    # A's call was refused: the node never got the NIC, and the log gave it back
    assert copy_macs(services, vm_uuid, server_uuid) == []
    assert taken_by_a_fence(json_logs, add)
    assert services.commands.load(vm_uuid).nic_list == []
    assert claims(services, network) == {}
    assert job(services, add)["execution"] == "canceled"
    [fence] = fence_jobs(services, vm_uuid)
    assert fence["execution"] == "succeeded", fence
    assert [step["name"] for step in fence["chain_results"]] == ["fence"]
    assert services.commands.load(vm_uuid).state == "quarantined"


@pytest.mark.parametrize(("action", "args", "call"), [
    (Action.STOP, {}, "ensure_state"),
    (Action.REBOOT, {}, "ensure_state"),
    (Action.UPDATE, {"alias": "renamed"}, "reconfigure"),
], ids=["stop", "reboot", "update"])
def test_a_running_job_a_quarantine_cancels_changes_nothing_on_the_node_when_it_resumes(
        services, monkeypatch, json_logs, action, args, call):
    vm_uuid = running_vm(services)
    server_uuid = services.commands.load(vm_uuid).server_uuid
    before = copies(services, vm_uuid), services.fleet.boots(vm_uuid), \
        services.fleet.config(server_uuid, vm_uuid)
    canceled = act(services, vm_uuid, action, args=args).job_uuid
    services.projections.catch_up()

    def meanwhile() -> None:
        by_the_operator(services, vm_uuid)
        worker_b(services).run_vm(vm_uuid)  # the fence job

    assert paused_in(services, monkeypatch, call, vm_uuid, meanwhile) == []

    # an update's fields are set back as the log has them (fence_settle.py): no alias is
    # an alias of None
    assert (copies(services, vm_uuid), services.fleet.boots(vm_uuid),
            as_set(services.fleet.config(server_uuid, vm_uuid))) == (*before[:2],
                                                                     as_set(before[2]))
    assert [(server_uuid, "running")] == before[0]
    assert taken_by_a_fence(json_logs, canceled)
    [fence] = fence_jobs(services, vm_uuid)
    assert fence["execution"] == "succeeded", fence
    # what the node reports, once fenced; then the canceled job's effect settled there
    # (fence_settle.py): nothing took place, so nothing is adopted, or set back as it was
    step, settled = fence["chain_results"]
    assert step["result"] == {"server_uuid": server_uuid, "state": "running",
                              "incarnation": 1}
    assert settled["name"] == "reconcile" and settled["error"] is None
    vm = services.commands.load(vm_uuid)
    assert vm.quarantine["previous_state"] == "running"
    # nothing of it took place: a canceled stop's ask is withdrawn (an operator tester's
    # repro B: it was left desired stopped, and the VM not restarted after a host reboot)
    assert vm.desired_state == "running"


def as_set(config: dict) -> dict:
    """A copy's configuration without the fields it has no value for."""
    return {key: value for key, value in config.items() if value is not None}


def test_a_fence_job_that_cannot_reach_the_node_fails_and_the_nic_is_kept(
        services, monkeypatch):
    vm_uuid, server_uuid, network = running_vm_with_a_network(services)
    change(services, vm_uuid, add=[network])
    [nic] = services.commands.load(vm_uuid).nic_list
    services.projections.catch_up()

    def meanwhile() -> None:
        by_the_operator(services, vm_uuid)
        # the fence job cannot reach the node: its raise fails each attempt
        services.fleet.faults.inject("inventory", "fail", services.worker.step_attempts)
        worker_b(services).run_vm(vm_uuid)

    paused_in(services, monkeypatch, "reconfigure", vm_uuid, meanwhile)

    [fence] = fence_jobs(services, vm_uuid)
    assert fence["execution"] == "failed", fence
    # no fence went up, so A's call landed: the VM keeps its NIC and its address, as the node
    assert copy_macs(services, vm_uuid, server_uuid) == [nic["mac"]]
    assert services.commands.load(vm_uuid).nic_list == [nic]
    assert claims(services, network) == {nic["ip"]: vm_uuid}


def test_a_running_job_a_v2_delete_destroys_at_once_changes_nothing_on_the_node(
        services, monkeypatch, json_logs):
    # destroyed at once only when every server a copy may be on is removed (here recorded
    # by an operator, its node still running the VM): a removed server refuses every call
    vm_uuid = running_vm(services)
    server_uuid = services.commands.load(vm_uuid).server_uuid
    stop = act(services, vm_uuid, Action.STOP).job_uuid
    services.projections.catch_up()
    deleted = []

    def meanwhile() -> None:
        services.commands.remove_server(server_uuid, cause=make_cause("operator"))
        services.projections.catch_up()
        deleted.append(act(services, vm_uuid, Action.DESTROY))
        assert services.commands.load(vm_uuid).state == "destroyed"
        worker_b(services).run_vm(vm_uuid)  # the fence job

    assert paused_in(services, monkeypatch, "ensure_state", vm_uuid, meanwhile) == []

    assert deleted[0].job_uuid is None  # destroyed at once: the 204
    assert copies(services, vm_uuid) == [(server_uuid, "running")]  # A's stop refused
    assert taken_by_a_fence(json_logs, stop)
    assert job(services, stop)["execution"] == "canceled"
    [fence] = fence_jobs(services, vm_uuid)
    assert fence["execution"] == "succeeded", fence
    # the fence went up on the node; nothing more is asked of a server recorded removed
    [step] = fence["chain_results"]
    assert step["result"] == {"server_uuid": server_uuid, "fence": "raised", "refused":
                              f"server {server_uuid} is removed", "nics_dropped": True}
    vm = services.commands.load(vm_uuid)
    assert (vm.state, vm.active_jobs) == ("destroyed", [])


# -- a VM whose copy may be on two servers ----------------------------------------------------

def by_an_immediate_destroy(services, vm_uuid: str) -> None:
    """Both servers recorded removed by an operator (their nodes still up), then a v2
    DELETE, which destroys the VM at once."""
    for server_uuid in services.commands.load(vm_uuid).copy_servers:
        services.commands.remove_server(server_uuid, cause=make_cause("operator"))
    services.projections.catch_up()  # the worker and DELETE read removals from server_view
    assert act(services, vm_uuid, Action.DESTROY).job_uuid is None
    assert services.commands.load(vm_uuid).state == "destroyed"


CANCELS: dict[str, Callable[..., None]] = {
    "quarantine": by_the_operator, "immediate-destroy": by_an_immediate_destroy}


@pytest.mark.parametrize("cancel", CANCELS.values(), ids=CANCELS.keys())
def test_a_canceled_job_whose_vm_has_copies_on_two_servers_is_fenced_off_on_both(
        services, monkeypatch, json_logs, cancel):
    # The VM ran on S1 until S1's host rebooted; the start its policy queued places it anew
    # on S2 (copy_servers: S1, its server, and S2, its claim) and A, running it, is paused
    # in its boot on S2 while the cancel and B's fence job run. Each node keeps its own
    # fences, so the fence job must raise it on both: A's late calls are refused on each.
    vm_uuid = running_vm_of_agents(services)
    first = services.commands.load(vm_uuid).server_uuid
    second = next(s.uuid for s in services.fleet.servers() if s.uuid != first)
    monkeypatch.setattr(services.worker, "placement", lambda _vm: [second])
    services.fleet.reboot_server(first)
    assert report(services, first) == {vm_uuid: "host_reboot"}  # queues the policy's start
    services.projections.catch_up()
    start = services.commands.load(vm_uuid).head_job["uuid"]
    fences: list[Fence] = []
    original = services.fleet.ensure_state

    def boot_paused(server_uuid, vm, state, **kwargs):
        monkeypatch.setattr(services.fleet, "ensure_state", original)
        fences.append(kwargs["fence"])
        assert services.commands.load(vm_uuid).copy_servers == [first, second]
        cancel(services, vm_uuid)
        assert worker_b(services).run_vm(vm_uuid)  # the fence job
        return original(server_uuid, vm, state, **kwargs)

    monkeypatch.setattr(services.fleet, "ensure_state", boot_paused)
    assert services.worker.run_vm(vm_uuid)

    assert taken_by_a_fence(json_logs, start)  # A's boot on S2, refused there
    assert copies(services, vm_uuid) == [(second, "stopped")]
    assert services.fleet.boots(vm_uuid) == 0
    for server_uuid in (first, second):  # a late call of A on either node
        with pytest.raises(FencedOffError, match=f"on server {server_uuid}"):
            services.fleet.ensure_registered(server_uuid, vm_uuid, ram_mib=128, metadata={},
                                             fence=fences[0])
    assert copies(services, vm_uuid) == [(second, "stopped")]
    assert job(services, start)["execution"] == "canceled"
    [fence] = fence_jobs(services, vm_uuid)
    assert fence["execution"] == "succeeded", fence
    fenced = [step for step in fence["chain_results"] if step["name"] == "fence"]
    assert [step["result"]["server_uuid"] for step in fenced] == [first, second]
    # the canceled start's boot was refused: nothing to adopt (fence_settle.py)
    assert all(step["error"] is None for step in fence["chain_results"])
    assert "Started" not in state_events(services, vm_uuid)
