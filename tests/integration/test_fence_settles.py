"""A stop, reboot or update whose compute call reached the node just before a quarantine
canceled it: its ``fence`` job settles what it did there, as a step whose answer was lost
does (docs/jobs.md, "A quarantine while a job runs", rows Q1 to Q3). What took place is
adopted in the log while the VM is quarantined (the release gives it back as the node holds
it), and a reconfigure is set back on the node as the log has it.

The quarantine runs right after the worker's call returns, before the worker records it
(``test_quarantine.QuarantineDuring``); the fence job then runs with the plain driver. No
sleeps, both backends.
"""

from __future__ import annotations

from domain.states import Action
from domain.vm import make_cause
from projections.analytics_queries import AnalyticsQueries
from service.commands.versioning import NEWEST
from tests.builders import settle
from tests.integration.test_agents import report, running_vm
from tests.integration.test_fencing import boots_recorded
from tests.integration.test_job_faults import copies, state_events
from tests.integration.test_quarantine import QuarantineDuring


def canceled_after_its_call(services, monkeypatch, vm_uuid: str, action: Action, call: str,
                            args: dict | None = None) -> None:
    """Run ``action``'s job; its ``call`` reaches the node, then the operator quarantines
    the VM; then the fence job runs."""
    services.commands.request_action(vm_uuid, action, behaviour=NEWEST, args=args or {},
                                     cause=make_cause("owner"))
    racing = QuarantineDuring(services, vm_uuid, call)
    driver = services.worker.driver
    monkeypatch.setattr(services.worker, "driver", racing)
    assert services.worker.run_vm(vm_uuid)
    assert racing.landed
    assert services.commands.load(vm_uuid).state == "quarantined"
    monkeypatch.setattr(services.worker, "driver", driver)
    settle(services)  # the fence job
    vm = services.commands.load(vm_uuid)
    assert vm.state == "quarantined" and vm.active_jobs == []


def release(services, vm_uuid: str) -> str:
    services.quarantine.release(vm_uuid, cause=make_cause("operator"))
    return services.commands.load(vm_uuid).state


def test_a_stop_that_reached_the_node_is_adopted_and_the_release_gives_the_vm_stopped(
        services, monkeypatch):
    vm_uuid = running_vm(services, "ephemeral")
    server_uuid = services.commands.load(vm_uuid).server_uuid
    canceled_after_its_call(services, monkeypatch, vm_uuid, Action.STOP, "ensure_state")
    assert copies(services, vm_uuid) == [(server_uuid, "stopped")]
    assert release(services, vm_uuid) == "stopped"
    # the node's stopped copy is what the log says: no guest shutdown, nothing destroyed
    assert report(services, server_uuid) == {}
    settle(services)
    vm = services.commands.load(vm_uuid)
    # the stop the node did is what the operator asked: its ask holds again (the cancel
    # had withdrawn it; docs/jobs.md, "The desired state")
    assert (vm.state, vm.desired_state) == ("stopped", "stopped")
    assert state_events(services, vm_uuid) == ["Provisioned", "Stopped"]
    # the analytics fold the adopted stop as the domain does: given back stopped
    services.projections.catch_up()
    analytics = AnalyticsQueries(services.db)
    assert analytics.states()["stopped"] == 1
    assert {(t["from"], t["to"]) for t in analytics.transitions()} == {
        ("provisioning", "running"), ("running", "quarantined"),
        ("quarantined", "quarantined"), ("quarantined", "stopped")}


def test_a_reboot_that_reached_the_node_is_adopted_so_the_log_counts_the_nodes_boots(
        services, monkeypatch):
    vm_uuid = running_vm(services)
    canceled_after_its_call(services, monkeypatch, vm_uuid, Action.REBOOT, "ensure_state")
    assert services.fleet.boots(vm_uuid) == boots_recorded(services, vm_uuid) == 2
    assert release(services, vm_uuid) == "running"


def test_an_update_that_reached_the_node_is_set_back_there_as_the_log_has_it(
        services, monkeypatch):
    vm_uuid = running_vm(services)
    vm = services.commands.load(vm_uuid)
    canceled_after_its_call(services, monkeypatch, vm_uuid, Action.UPDATE, "reconfigure",
                            {"alias": "renamed"})
    assert services.commands.load(vm_uuid).alias == vm.alias
    assert services.fleet.config(vm.server_uuid, vm_uuid)["alias"] == vm.alias
    assert release(services, vm_uuid) == "running"


def test_a_stop_that_reached_the_node_is_adopted_when_the_vm_was_released_before_its_fence(
        services, monkeypatch):
    # released, then quarantined again before the fence job ran: the next fence job still
    # settles the stop (``owed_fence`` passes ``canceled_job`` on); released once more first,
    # the fence job, the VM's head job, records the stop as the stop job would have
    vm_uuid = running_vm(services, "ephemeral")
    server_uuid = services.commands.load(vm_uuid).server_uuid
    services.commands.request_action(vm_uuid, Action.STOP, behaviour=NEWEST, args={},
                                     cause=make_cause("owner"))
    racing = QuarantineDuring(services, vm_uuid, "ensure_state")
    driver = services.worker.driver
    monkeypatch.setattr(services.worker, "driver", racing)
    assert services.worker.run_vm(vm_uuid)
    monkeypatch.setattr(services.worker, "driver", driver)
    assert release(services, vm_uuid) == "running"  # the fence job has not run
    services.quarantine.quarantine(vm_uuid, "again", cause=make_cause("operator"))
    assert release(services, vm_uuid) == "running"
    settle(services)  # the second fence job
    vm = services.commands.load(vm_uuid)
    assert (vm.state, vm.desired_state) == ("stopped", "stopped")
    assert report(services, server_uuid) == {}
    settle(services)
    vm = services.commands.load(vm_uuid)
    # the stop the node did is what the operator asked: its ask holds again (the cancel
    # had withdrawn it; docs/jobs.md, "The desired state")
    assert (vm.state, vm.desired_state) == ("stopped", "stopped")
    assert state_events(services, vm_uuid) == ["Provisioned", "Stopped"]
