"""An agent's report taken before a job's step and applied after the job recorded its result
changes nothing for that VM (domain/vm_reports.py, docs/jobs.md "Reports older than a job's
step"). Each interleaving deterministically: the simulated agent takes its report, the job
runs to its end, then the report is applied."""

from __future__ import annotations

import logging

import pytest

from domain.states import Action
from domain.vm import make_cause
from service.commands.application import VmSpec
from service.commands.versioning import NEWEST
from service.commands.vm_agent import AgentVm, AgentVmReports
from service.jobs.compute.simulated import simulated_server_uuid
from service.metrics import REPORT_ENTRIES_OLDER_THAN_LOG
from tests.builders import event_names, settle

OWNER = "930896af-bf8c-48d4-885c-6573a94b1853"
AGENT = make_cause("agent")
S = simulated_server_uuid(1)


def taken(services) -> dict:
    """The simulated agent of ``S`` takes its inventory report (not applied yet)."""
    return services.fleet.report(S)


def apply(services, sent: dict, *, numbered: bool = True) -> dict[str, str]:
    """Apply a report taken earlier, with its sequence number (or as an older agent would
    send it, without one)."""
    return services.agents.report_inventory(
        S, boot_id=sent["boot_id"], generation=sent["generation"],
        vms={vm: seen["state"] for vm, seen in sent["vms"].items()}, cause=AGENT,
        seq=sent["seq"] if numbered else None).changed


def pinned(services, persistence: str | dict = "persistent") -> str:
    return services.commands.create_vm(
        VmSpec(owner_uuid=OWNER, brand="bhyve", ram=128, server_uuid=S,
               persistence=persistence), cause=make_cause()).vm_uuid


def act(services, vm_uuid: str, action: Action) -> None:
    services.commands.request_action(vm_uuid, action, behaviour=NEWEST, cause=make_cause())
    settle(services)


def test_a_report_taken_before_a_provision_does_not_quarantine_the_vm_it_missed(
        services, caplog):
    vm_uuid = pinned(services)
    sent = taken(services)  # the VM is not on the node yet
    assert vm_uuid not in sent["vms"]
    settle(services)  # Provisioned, JobSucceeded
    before = REPORT_ENTRIES_OLDER_THAN_LOG._value.get()
    with caplog.at_level(logging.INFO, logger="vmledger.service.commands.agents"):
        assert apply(services, sent) == {}
    vm = services.commands.load(vm_uuid)
    assert vm.state == "running" and "Quarantined" not in event_names(services, vm_uuid)
    assert REPORT_ENTRIES_OLDER_THAN_LOG._value.get() == before + 1
    assert f"changed nothing for VM {vm_uuid}" in caplog.text
    # the next report, taken after the provision, lists it and agrees
    assert apply(services, taken(services)) == {}


def test_an_unnumbered_report_is_ordered_by_its_generation_alone_as_before(services):
    """The fallback for an agent that sends no ``seq`` (api.md): nothing orders its report
    against the job, so the VM it missed reads as forgotten."""
    vm_uuid = pinned(services)
    sent = taken(services)
    settle(services)
    assert apply(services, sent, numbered=False) == {vm_uuid: "agent_forgot"}


@pytest.mark.parametrize(("persistence", "final"), [
    ("persistent", "running"),
    ({"preset": "persistent", "guest_shutdown": "destroy"}, "running")])
def test_a_report_taken_while_stopped_is_not_a_guest_shutdown_once_a_start_recorded(
        services, persistence, final):
    vm_uuid = pinned(services, persistence)
    settle(services)
    act(services, vm_uuid, Action.STOP)
    sent = taken(services)
    assert sent["vms"][vm_uuid]["state"] == "stopped"
    act(services, vm_uuid, Action.START)  # Started, as of a later number
    events = event_names(services, vm_uuid)
    assert apply(services, sent) == {}
    settle(services)
    assert services.commands.load(vm_uuid).state == final
    assert event_names(services, vm_uuid) == events  # nothing appended, no destroy queued
    assert services.fleet.running_copies(vm_uuid) == 1


def test_a_report_taken_while_running_is_not_a_start_once_a_stop_recorded(services):
    vm_uuid = pinned(services)
    settle(services)
    sent = taken(services)
    act(services, vm_uuid, Action.STOP)
    assert apply(services, sent) == {}
    assert services.commands.load(vm_uuid).state == "stopped"
    assert services.fleet.running_copies(vm_uuid) == 0


def test_a_report_taken_after_the_step_is_applied_as_ever(services):
    vm_uuid = pinned(services)
    settle(services)
    services.fleet.shut_down_guest(vm_uuid)  # after the provision's step: a newer number
    assert apply(services, taken(services)) == {vm_uuid: "guest_shutdown"}
    assert services.commands.load(vm_uuid).state == "stopped"


def test_a_single_vm_report_older_than_the_step_changes_nothing(services):
    vm_uuid = pinned(services)
    settle(services)
    act(services, vm_uuid, Action.STOP)
    sent = taken(services)
    act(services, vm_uuid, Action.START)
    answered, _ = services.agents.report_vm(vm_uuid, server_uuid=S, state="stopped",
                                         boot_id=sent["boot_id"],
                                         generation=sent["generation"], seq=sent["seq"],
                                         cause=AGENT)
    assert answered.state == "running"
    assert services.commands.load(vm_uuid).state == "running"


def test_a_vm_agent_report_with_an_older_seq_changes_nothing_and_without_one_is_as_before(
        services):
    """vm-agent's form carries no number of its own; one an agent adds is read as the
    generation form's."""
    vm_uuid = pinned(services)
    settle(services)
    act(services, vm_uuid, Action.STOP)
    sent = taken(services)
    act(services, vm_uuid, Action.START)
    reports = AgentVmReports(services.agents)
    reports.put(vm_uuid, AgentVm(state="stopped", server_uuid=S, seq=sent["seq"]), cause=AGENT)
    assert services.commands.load(vm_uuid).state == "running"
    reports.put(vm_uuid, AgentVm(state="stopped", server_uuid=S), cause=AGENT)
    assert services.commands.load(vm_uuid).state == "stopped"  # unordered: as before


def test_a_report_taken_before_a_stop_a_takeover_adopted_is_not_a_start(services, monkeypatch):
    """Worker A's stop lands on the node while A is paused; worker B, with no attempts left,
    adopts it (``takeovers._adopt_stop``), recording the node's answer with its sequence
    number. A report the node took before the stop landed says running: it changes nothing."""
    from tests.integration.test_fencing import paused_in
    from tests.integration.test_job_faults import rescuer

    vm_uuid = pinned(services)
    settle(services)
    stop = services.commands.request_action(vm_uuid, Action.STOP, behaviour=NEWEST,
                                            cause=make_cause()).job_uuid
    sent: dict = {}

    def meanwhile() -> None:
        services.fleet.observe(S, vm_uuid)  # any look at the node numbers its next answer
        sent.update(taken(services))  # before the stop lands, numbered after the boot
        services.fleet.ensure_state(S, vm_uuid, "stopped", effect=stop)  # A's call lands
        b = rescuer(services, "b")
        b.max_attempts = 1
        assert b.run_vm(vm_uuid)  # gives up, adopting the stop

    observed = event_names(services, vm_uuid).count("NodeObserved")
    paused_in(services, monkeypatch, "ensure_state", vm_uuid, meanwhile)
    assert sent["vms"][vm_uuid]["state"] == "running"
    assert services.commands.load(vm_uuid).state == "stopped"
    assert event_names(services, vm_uuid).count("NodeObserved") == observed + 1
    events = event_names(services, vm_uuid)
    assert apply(services, sent) == {}
    assert services.commands.load(vm_uuid).state == "stopped"
    assert event_names(services, vm_uuid) == events
    assert services.fleet.running_copies(vm_uuid) == 0
