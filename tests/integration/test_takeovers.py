"""The takeover's decision table (docs/jobs.md, "Takeovers"), one test per row, on both
backends: what the log says the lost worker did × what the host reports, and what the
takeover records. Every row also asserts the host's truth: the simulator's copies and how
often each was booted (a replayed boot or reboot shows as one boot too many).

A worker's death is ``WorkerDied`` raised once from a compute call (before or after its work)
or from the job's last save, as in tests/integration/test_job_faults.py; the rescuer's clock
stands leases later. tests/integration/test_kill9.py does the same with real processes.
"""

from __future__ import annotations

import pytest

from domain.states import Action
from service.jobs.run import JobRun
from tests.builders import act, create, job, settle
from tests.integration.test_job_faults import (
    WorkerDied, copies, dies_once, rescuer, state_events, steps_by,
)


def running_vm(services) -> str:
    accepted = create(services)
    settle(services)
    assert services.commands.load(accepted.vm_uuid).state == "running"
    return accepted.vm_uuid


def dies_in_the_job(services, monkeypatch, vm_uuid: str, *, after_the_work: bool,
                    call: str = "ensure_state") -> None:
    """The worker that claims the VM's head job dies in ``call`` (before or after its work)."""
    target = JobRun if call == "succeed" else services.fleet
    dies_once(monkeypatch, target, call, after_the_work=after_the_work)
    with pytest.raises(WorkerDied):
        services.worker.run_vm(vm_uuid)


def no_attempts_left(services, monkeypatch) -> None:
    monkeypatch.setattr(services.worker, "max_attempts", 1)


# -- provision ---------------------------------------------------------------------------------


def test_provision_booted_then_shut_down_by_its_guest_is_provisioned_then_stopped(
        services, monkeypatch):
    """Row P4 (input 1): the boot ran, the worker died before recording it, the guest shut the
    VM down and its agent reported; the takeover records Provisioned then Stopped and does not
    boot it again."""
    accepted = create(services)
    dies_in_the_job(services, monkeypatch, accepted.vm_uuid, after_the_work=True)
    services.fleet.shut_down_guest(accepted.vm_uuid)
    [(server_uuid, _)] = copies(services, accepted.vm_uuid)
    report = services.fleet.report(server_uuid)
    services.agents.report_inventory(
        server_uuid, boot_id=report["boot_id"], generation=report["generation"],
        vms={v: seen["state"] for v, seen in report["vms"].items()}, cause={"actor": "agent"})

    assert rescuer(services).run_vm(accepted.vm_uuid)

    assert state_events(services, accepted.vm_uuid) == ["Provisioned", "Stopped"]
    assert copies(services, accepted.vm_uuid) == [(server_uuid, "stopped")]
    assert services.fleet.boots(accepted.vm_uuid) == 1
    assert steps_by(services, accepted.vm_uuid, "rescuer") == ["reconcile"]
    reconcile = job(services, accepted.job_uuid)["chain_results"][-1]
    assert reconcile["result"] == {"server_uuid": server_uuid, "state": "stopped",
                                   "incarnation": 1, "begun_by_this_job": True}
    assert services.commands.load(accepted.vm_uuid).active_jobs == []  # persistent: stays


def test_provision_booted_then_crashed_is_provisioned_then_failed_and_restarted_once(
        services, monkeypatch):
    """Row P5: the guest crashed after the unrecorded boot; the persistence policy (persistent:
    restart) queues one start, which boots it a second time, and only once."""
    accepted = create(services)
    dies_in_the_job(services, monkeypatch, accepted.vm_uuid, after_the_work=True)
    services.fleet.crash_guest(accepted.vm_uuid)

    late = rescuer(services)
    assert late.run_vm(accepted.vm_uuid)
    assert state_events(services, accepted.vm_uuid) == ["Provisioned", "Failed"]
    assert services.fleet.boots(accepted.vm_uuid) == 1
    while late.run_vm(accepted.vm_uuid):
        pass

    assert state_events(services, accepted.vm_uuid) == ["Provisioned", "Failed", "Started"]
    assert services.fleet.boots(accepted.vm_uuid) == 2
    assert services.fleet.running_copies(accepted.vm_uuid) == 1


def test_provision_with_no_attempts_left_adopts_the_vm_its_lost_worker_booted(
        services, monkeypatch):
    """Row P7 (input 4): VMLEDGER_JOB_MAX_ATTEMPTS=1 and a worker killed after the boot ran."""
    no_attempts_left(services, monkeypatch)
    accepted = create(services)
    dies_in_the_job(services, monkeypatch, accepted.vm_uuid, after_the_work=True)

    assert rescuer(services).run_vm(accepted.vm_uuid)

    [(server_uuid, power)] = copies(services, accepted.vm_uuid)
    assert power == "running"
    vm = services.commands.load(accepted.vm_uuid)
    assert (vm.state, vm.server_uuid) == ("running", server_uuid)
    assert state_events(services, accepted.vm_uuid) == ["Provisioned"]
    assert job(services, accepted.job_uuid)["execution"] == "succeeded"
    assert services.fleet.boots(accepted.vm_uuid) == 1


def test_provision_with_no_attempts_left_and_a_copy_never_booted_removes_it_and_fails(
        services, monkeypatch):
    """Row P8: created, never booted, no attempts left: nothing took effect that a user could
    have seen, so nothing is left behind and the provision fails."""
    no_attempts_left(services, monkeypatch)
    accepted = create(services)
    dies_in_the_job(services, monkeypatch, accepted.vm_uuid, after_the_work=False)
    assert len(copies(services, accepted.vm_uuid)) == 1

    assert rescuer(services).run_vm(accepted.vm_uuid)

    vm = services.commands.load(accepted.vm_uuid)
    assert (vm.state, vm.server_uuid, vm.claim) == ("failed", None, None)
    assert "gave up" in job(services, accepted.job_uuid)["error"]
    assert copies(services, accepted.vm_uuid) == []


# -- start and reboot --------------------------------------------------------------------------


@pytest.mark.parametrize("guest_after", [None, "shutdown"])
def test_start_whose_boot_ran_unrecorded_is_recorded_not_repeated(
        services, monkeypatch, guest_after):
    """Rows S1 and S2: the start's boot ran, its worker died before recording it (and the
    guest may have shut the VM down since): Started (then Stopped), one boot more, not two."""
    vm_uuid = running_vm(services)
    act(services, vm_uuid, Action.STOP)
    settle(services)
    boots = services.fleet.boots(vm_uuid)
    started = act(services, vm_uuid, Action.START).job_uuid
    dies_in_the_job(services, monkeypatch, vm_uuid, after_the_work=True)
    if guest_after:
        services.fleet.shut_down_guest(vm_uuid)

    assert rescuer(services).run_vm(vm_uuid)

    expected = ["Provisioned", "Stopped", "Started"] + (["Stopped"] if guest_after else [])
    assert state_events(services, vm_uuid) == expected
    assert services.fleet.boots(vm_uuid) == boots + 1
    assert job(services, started)["execution"] == "succeeded"
    assert copies(services, vm_uuid)[0][1] == ("stopped" if guest_after else "running")


def test_start_whose_worker_died_before_the_boot_boots_it_once(services, monkeypatch):
    """Row S3: nothing ran: the takeover boots it."""
    vm_uuid = running_vm(services)
    act(services, vm_uuid, Action.STOP)
    settle(services)
    boots = services.fleet.boots(vm_uuid)
    act(services, vm_uuid, Action.START)
    dies_in_the_job(services, monkeypatch, vm_uuid, after_the_work=False)

    assert rescuer(services).run_vm(vm_uuid)

    assert services.commands.load(vm_uuid).state == "running"
    assert services.fleet.boots(vm_uuid) == boots + 1


@pytest.mark.parametrize("attempts_left", [True, False], ids=["attempts-left", "none-left"])
def test_reboot_that_ran_unrecorded_is_recorded_once_not_repeated(
        services, monkeypatch, attempts_left):
    """Rows R1 and R3 (input 7): the reboot ran, its worker died before recording it; the
    takeover (also one with no attempts left) records one Rebooted and the host booted once
    more, not twice."""
    vm_uuid = running_vm(services)
    boots = services.fleet.boots(vm_uuid)
    rebooted = act(services, vm_uuid, Action.REBOOT).job_uuid
    if not attempts_left:
        no_attempts_left(services, monkeypatch)
    dies_in_the_job(services, monkeypatch, vm_uuid, after_the_work=True)

    assert rescuer(services).run_vm(vm_uuid)

    assert state_events(services, vm_uuid) == ["Provisioned", "Rebooted"]
    assert services.fleet.boots(vm_uuid) == boots + 1
    assert job(services, rebooted)["execution"] == "succeeded"


def test_reboot_whose_worker_died_before_the_reboot_reboots_once(services, monkeypatch):
    """Row R2."""
    vm_uuid = running_vm(services)
    boots = services.fleet.boots(vm_uuid)
    act(services, vm_uuid, Action.REBOOT)
    dies_in_the_job(services, monkeypatch, vm_uuid, after_the_work=False)

    assert rescuer(services).run_vm(vm_uuid)

    assert state_events(services, vm_uuid) == ["Provisioned", "Rebooted"]
    assert services.fleet.boots(vm_uuid) == boots + 1


def test_reboot_of_a_vm_its_guest_shut_down_reboots_nothing_and_records_the_shutdown(services):
    """Row R4: the run the reboot meant to end is already over on the host: nothing is booted,
    the job fails, and the log learns the guest's shutdown."""
    vm_uuid = running_vm(services)
    boots = services.fleet.boots(vm_uuid)
    rebooted = act(services, vm_uuid, Action.REBOOT).job_uuid
    services.fleet.shut_down_guest(vm_uuid)
    settle(services)

    assert job(services, rebooted)["execution"] == "failed"
    assert state_events(services, vm_uuid) == ["Provisioned", "Stopped"]
    assert services.fleet.boots(vm_uuid) == boots


def test_start_with_no_attempts_left_and_nothing_run_fails_and_boots_nothing(
        services, monkeypatch):
    """Row S4."""
    vm_uuid = running_vm(services)
    act(services, vm_uuid, Action.STOP)
    settle(services)
    boots = services.fleet.boots(vm_uuid)
    started = act(services, vm_uuid, Action.START).job_uuid
    no_attempts_left(services, monkeypatch)
    dies_in_the_job(services, monkeypatch, vm_uuid, after_the_work=False)

    assert rescuer(services).run_vm(vm_uuid)

    assert services.commands.load(vm_uuid).state == "stopped"
    assert job(services, started)["execution"] == "failed"
    assert services.fleet.boots(vm_uuid) == boots


# -- stop --------------------------------------------------------------------------------------


def test_stop_that_ran_unrecorded_is_recorded_by_the_takeover(services, monkeypatch):
    """Row T1: a stop is idempotent: the takeover finds it stopped and records Stopped."""
    vm_uuid = running_vm(services)
    act(services, vm_uuid, Action.STOP)
    dies_in_the_job(services, monkeypatch, vm_uuid, after_the_work=True)

    assert rescuer(services).run_vm(vm_uuid)

    assert state_events(services, vm_uuid) == ["Provisioned", "Stopped"]
    assert copies(services, vm_uuid)[0][1] == "stopped"


def test_stop_with_no_attempts_left_whose_stop_ran_is_recorded_stopped(services, monkeypatch):
    """Row T5: giving up a stop whose effect ran adopts it (found by the fault run: the log
    said running, the host stopped)."""
    vm_uuid = running_vm(services)
    stopped = act(services, vm_uuid, Action.STOP).job_uuid
    no_attempts_left(services, monkeypatch)
    dies_in_the_job(services, monkeypatch, vm_uuid, after_the_work=True)

    assert rescuer(services).run_vm(vm_uuid)

    assert state_events(services, vm_uuid) == ["Provisioned", "Stopped"]
    assert job(services, stopped)["execution"] == "succeeded"
    assert copies(services, vm_uuid)[0][1] == "stopped"


def test_stop_of_a_vm_its_rebooted_host_no_longer_has_stops_it_and_releases_its_capacity(
        services):
    """Row T2 (input 2): the host rebooted, the stop runs before the agent reports; then the
    report comes and nothing restarts the VM."""
    vm_uuid = running_vm(services)
    server_uuid = services.commands.load(vm_uuid).server_uuid
    services.fleet.reboot_server(server_uuid)
    stopped = act(services, vm_uuid, Action.STOP).job_uuid
    settle(services)

    vm = services.commands.load(vm_uuid)
    assert (vm.state, vm.claim) == ("stopped", None)
    assert job(services, stopped)["execution"] == "succeeded"
    assert vm_uuid not in services.commands.load_server(server_uuid).claims
    report = services.fleet.report(server_uuid)
    services.agents.report_inventory(
        server_uuid, boot_id=report["boot_id"], generation=report["generation"],
        vms={}, cause={"actor": "agent"})
    settle(services)
    vm = services.commands.load(vm_uuid)
    assert (vm.state, vm.active_jobs) == ("stopped", [])
    assert copies(services, vm_uuid) == []


def test_stop_of_a_vm_failed_by_a_host_reboot_stops_it(services):
    """Row T3 (input 3): persistence ``host_reboot: stay_stopped``, the report marked it
    failed; the stop ends it stopped."""
    accepted = create(services, persistence={"host_reboot": "stay_stopped"})
    settle(services)
    vm_uuid = accepted.vm_uuid
    server_uuid = services.commands.load(vm_uuid).server_uuid
    boot_id = services.fleet.reboot_server(server_uuid)
    services.agents.host_rebooted(server_uuid, boot_id, cause={"actor": "agent"})
    assert services.commands.load(vm_uuid).state == "failed"
    stopped = act(services, vm_uuid, Action.STOP).job_uuid
    settle(services)

    assert services.commands.load(vm_uuid).state == "stopped"
    assert job(services, stopped)["execution"] == "succeeded"
    assert copies(services, vm_uuid) == []


def test_stop_of_a_vm_its_agent_forgot_under_the_same_boot_id_fails(services):
    """Row T4: the VM is unknown to its agent but the host did not reboot: it may still run
    there, so the stop cannot claim it stopped."""
    vm_uuid = running_vm(services)
    server_uuid = services.commands.load(vm_uuid).server_uuid
    services.fleet.restart_agent(server_uuid)
    stopped = act(services, vm_uuid, Action.STOP).job_uuid
    settle(services)

    assert job(services, stopped)["execution"] == "failed"
    assert services.commands.load(vm_uuid).state == "running"
    assert services.fleet.running_copies(vm_uuid) == 1
