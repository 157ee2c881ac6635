"""The operator quarantine (design.md, lesson 3): taken from the owner with its history,
given back as it was; stuck VMs are quarantined by the worker's check and by their owner's
DELETE, and nothing else is."""

from __future__ import annotations

import logging
from datetime import timedelta
from collections.abc import Callable
from typing import Any

import pytest

from domain.errors import InvalidTransitionError
from domain.states import Action
from domain.vm import QUARANTINE_OWNER_UUID, Vm, make_cause
from projections.analytics import epoch_ms
from projections.analytics_queries import AnalyticsQueries
from projections.formats import rfc3339
from service.commands.application import VmSpec
from service.commands.versioning import NEWEST, OLDEST
from service.jobs.worker import utcnow
from tests.builders import event_names, settle

OWNER = "930896af-bf8c-48d4-885c-6573a94b1853"


def create(services, *, run: bool = True) -> str:
    vm_uuid = services.commands.create_vm(VmSpec(owner_uuid=OWNER, brand="bhyve", ram=256),
                                          cause=make_cause()).vm_uuid
    if run:
        settle(services)
    return vm_uuid


def later(services, seconds: float):
    """Make the quarantine's clock read ``seconds`` from now."""
    services.quarantine.stuck.clock = lambda: utcnow() + timedelta(seconds=seconds)


def test_quarantine_takes_the_vm_from_its_owner_and_release_gives_it_back_as_it_was(client):
    created = client.post("/vms", json={"owner_uuid": OWNER, "brand": "bhyve", "ram": 256})
    client.get(f"/jobs/{created.json()['job_uuid']}/wait", params={"timeout": 10})
    vm_uuid = created.json()["vm_uuid"]
    taken = client.post(f"/vms/{vm_uuid}?action=quarantine", json={"reason": "disk errors"})
    assert taken.status_code == 200, taken.text
    vm = taken.json()
    assert (vm["state"], vm["owner_uuid"]) == ("quarantined", QUARANTINE_OWNER_UUID)
    assert vm["quarantine"]["reason"] == "disk errors"
    assert vm["quarantine"]["previous_owner_uuid"] == OWNER
    assert client.get(f"/vms/{vm_uuid}", params={"owner_uuid": OWNER}).status_code == 404
    refused = client.post(f"/vms/{vm_uuid}", params={"action": "stop", "owner_uuid": OWNER})
    assert refused.status_code == 404, refused.text
    listed = client.get("/vms", params={"owner_uuid": OWNER}).json()
    assert vm_uuid not in [v["uuid"] for v in listed]
    history = client.get(f"/vms/{vm_uuid}/history").json()
    quarantined = next(e for e in history if e["type"] == "Quarantined")
    assert quarantined["data"]["reason"] == "disk errors" and quarantined["cause"]["actor"]
    back = client.post(f"/vms/{vm_uuid}?action=release")
    assert back.status_code == 200, back.text
    assert (back.json()["state"], back.json()["owner_uuid"]) == ("running", OWNER)
    assert back.json()["quarantine"] is None


def test_quarantine_of_a_destroyed_vm_and_release_of_a_free_one_are_refused(services):
    vm_uuid = create(services)
    with pytest.raises(InvalidTransitionError):
        services.quarantine.release(vm_uuid, cause=make_cause())
    services.commands.request_action(vm_uuid, Action.DESTROY, behaviour=NEWEST,
                                     cause=make_cause())
    settle(services)
    with pytest.raises(InvalidTransitionError):
        services.quarantine.quarantine(vm_uuid, "too late", cause=make_cause())


def test_the_stuck_check_quarantines_a_vm_stuck_past_the_threshold_and_nothing_else(services):
    fine = create(services)
    services.fleet.faults.pause_workers(True)  # the next provision never runs: stuck
    stuck = create(services, run=False)
    services.projections.catch_up()
    threshold = services.quarantine.stuck.thresholds.transient_s
    later(services, threshold / 2)
    services.worker.periodic()
    assert services.commands.load(stuck).state == "provisioning"  # not past it yet
    later(services, threshold + 1)
    services.worker.periodic()
    assert services.commands.load(stuck).state == "quarantined"
    assert "stuck in provisioning" in services.commands.load(stuck).quarantine["reason"]
    assert services.commands.load(fine).state == "running"


def test_a_job_running_past_its_deadline_gets_its_vm_quarantined(services):
    vm_uuid = create(services)
    services.commands.request_action(vm_uuid, Action.STOP, behaviour=NEWEST, cause=make_cause())
    head = services.commands.load(vm_uuid).head_job
    now = utcnow()
    services.commands.change(Vm, vm_uuid, lambda vm: vm.start_job(
        head["uuid"], worker="hung", now=now, lease_expires_at=now + timedelta(days=1),
        cause=make_cause("hung")))
    services.projections.catch_up()
    later(services, services.quarantine.stuck.thresholds.job_s + 1)
    services.worker.periodic()
    vm = services.commands.load(vm_uuid)
    assert vm.state == "quarantined" and "running since" in vm.quarantine["reason"]
    # the hung job no longer holds the ticket: the fence job that fences it off does
    assert [j["name"] for j in vm.active_jobs] == ["fence"]
    services.projections.catch_up()
    hung = services.jobs.get(head["uuid"])
    assert hung["execution"] == "canceled" and "while the job ran" in hung["error"]


@pytest.mark.parametrize("behaviour", [OLDEST, NEWEST], ids=["v1", "v2"])
def test_an_owners_delete_of_a_stuck_vm_quarantines_it_instead_of_racing_the_stuck_job(
        services, behaviour):
    services.fleet.faults.pause_workers(True)
    vm_uuid = create(services, run=False)
    later(services, services.quarantine.stuck.thresholds.transient_s + 1)
    accepted = services.commands.request_action(vm_uuid, Action.DESTROY, behaviour=behaviour,
                                                cause=make_cause("owner"), owner_uuid=OWNER)
    assert accepted.job_uuid is not None  # the usual accepted answer
    vm = services.commands.load(vm_uuid)
    assert vm.state == "quarantined" and vm.owner_uuid == QUARANTINE_OWNER_UUID
    assert "deleted by its owner while stuck" in vm.quarantine["reason"]
    services.projections.catch_up()
    destroy = services.jobs.get(accepted.job_uuid)
    assert destroy["execution"] == "canceled" and "quarantined" in destroy["error"]
    services.fleet.faults.pause_workers(False)
    settle(services)
    assert services.commands.load(vm_uuid).state == "quarantined"  # nothing raced it


def test_a_delete_of_a_vm_that_is_not_stuck_is_an_ordinary_destroy(services):
    vm_uuid = create(services)
    later(services, 10 * services.quarantine.stuck.thresholds.transient_s)  # old, but running
    services.commands.request_action(vm_uuid, Action.DESTROY, behaviour=NEWEST,
                                     cause=make_cause())
    settle(services)
    assert services.commands.load(vm_uuid).state == "destroyed"


def test_a_vm_released_still_provisioning_gets_its_provision_queued_again(services):
    services.fleet.faults.pause_workers(True)
    vm_uuid = create(services, run=False)
    services.quarantine.quarantine(vm_uuid, "look at it", cause=make_cause("operator"))
    assert services.commands.load(vm_uuid).active_jobs == []  # its provision was canceled
    services.quarantine.release(vm_uuid, cause=make_cause("operator"))
    vm = services.commands.load(vm_uuid)
    assert vm.state == "provisioning" and [j["name"] for j in vm.active_jobs] == ["provision"]
    services.fleet.faults.pause_workers(False)
    settle(services)
    assert services.commands.load(vm_uuid).state == "running"


class QuarantineDuring:
    """The simulated fleet, except that an operator quarantines the VM (or does ``then``)
    while the job's first compute call named ``call`` is in progress: the node has done the
    work, the worker has not recorded it yet (a deterministic stand-in for an operator racing
    a running job)."""

    def __init__(self, services, vm_uuid: str, call: str,
                 then: Callable[[], object] | None = None):
        self._services = services
        self._fleet = services.worker.driver
        self._vm_uuid = vm_uuid
        self._call = call
        self._then = then or (lambda: services.quarantine.quarantine(
            vm_uuid, "disk errors", cause=make_cause("operator")))
        self.landed = False

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._fleet, name)
        if name != self._call:
            return attribute

        def call_then_quarantine(*args: Any, **kwargs: Any) -> Any:
            answer = attribute(*args, **kwargs)
            if not self.landed:
                self.landed = True
                self._then()
            return answer
        return call_then_quarantine


@pytest.mark.parametrize(("action", "args", "call"), [
    (Action.UPDATE, {"alias": "renamed"}, "reconfigure"),
    (Action.STOP, {}, "ensure_state"),
    (Action.REBOOT, {}, "ensure_state"),
], ids=["update", "stop", "reboot"])
def test_a_job_running_when_its_vm_is_quarantined_is_canceled_and_records_nothing_after(
        services, monkeypatch, caplog, action, args, call):
    vm_uuid = create(services)
    job_uuid = services.commands.request_action(vm_uuid, action, behaviour=NEWEST, args=args,
                                                cause=make_cause("owner")).job_uuid
    racing = QuarantineDuring(services, vm_uuid, call)
    monkeypatch.setattr(services.worker, "driver", racing)
    with caplog.at_level(logging.INFO, logger="vmledger"):
        assert services.worker.run_vm(vm_uuid)
    assert racing.landed
    names = event_names(services, vm_uuid)
    # the quarantine ends the running job in its own save (a stop's ask withdrawn with it:
    # docs/jobs.md, "The desired state"), and queues the fence job that fences it off on the
    # node; the worker records nothing after
    withdrawn = ["DesiredStateSet"] if action is Action.STOP else []
    assert names[-3 - len(withdrawn):] == [
        "JobCanceled", *withdrawn, "Quarantined", "JobQueued"], names
    vm = services.commands.load(vm_uuid)
    assert vm.state == "quarantined"
    assert [j["name"] for j in vm.active_jobs] == ["fence"]
    services.projections.catch_up()
    job = services.jobs.get(job_uuid)
    assert job["execution"] == "canceled", job
    assert "quarantined while the job ran" in job["error"]
    assert job["chain_results"][-1]["name"] == "cancel"
    # the worker sees its job taken away: no domain refusal, no traceback
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not any(r.exc_info for r in caplog.records)


def test_a_vm_quarantined_while_its_provision_boots_it_leaves_no_copy_once_destroyed(
        services, monkeypatch):
    vm_uuid = create(services, run=False)
    racing = QuarantineDuring(services, vm_uuid, "ensure_state")  # the provision's boot
    monkeypatch.setattr(services.worker, "driver", racing)
    services.worker.run_vm(vm_uuid)
    assert racing.landed
    vm = services.commands.load(vm_uuid)
    # the copy runs on the server it claimed; the VM never recorded that server
    assert vm.server_uuid is None and vm.claim is not None
    claimed = vm.claim["server_uuid"]
    assert vm_uuid in racing.inventory(claimed)
    destroy = services.commands.request_action(vm_uuid, Action.DESTROY, behaviour=NEWEST,
                                               cause=make_cause("operator")).job_uuid
    settle(services)
    assert services.commands.load(vm_uuid).state == "destroyed"
    job = services.jobs.get(destroy)
    assert job["execution"] == "succeeded"
    assert [step["name"] for step in job["chain_results"]] == ["unregister"]
    assert vm_uuid not in racing.inventory(claimed)


def test_a_v2_delete_that_destroys_at_once_ends_the_running_job_which_records_nothing_after(
        services, monkeypatch, caplog):
    vm_uuid = create(services)
    server_uuid = services.commands.load(vm_uuid).server_uuid
    job_uuid = services.commands.request_action(vm_uuid, Action.STOP, behaviour=NEWEST,
                                                cause=make_cause("owner")).job_uuid
    deleted = []

    def remove_the_server_then_delete() -> None:
        services.fleet.set_server_status(server_uuid, "removed")
        deleted.append(services.commands.request_action(
            vm_uuid, Action.DESTROY, behaviour=NEWEST, cause=make_cause("owner")))

    racing = QuarantineDuring(services, vm_uuid, "ensure_state", remove_the_server_then_delete)
    monkeypatch.setattr(services.worker, "driver", racing)
    with caplog.at_level(logging.INFO, logger="vmledger"):
        assert services.worker.run_vm(vm_uuid)
    assert racing.landed and deleted[0].job_uuid is None  # destroyed at once: the 204
    names = event_names(services, vm_uuid)
    # the delete ends the running job in its own save, and queues the fence job that fences
    # it off on the node; the worker records nothing after
    assert names[-5:] == ["JobCanceled", "DesiredStateSet", "CapacityReleased", "Destroyed",
                          "JobQueued"], names
    vm = services.commands.load(vm_uuid)
    assert vm.state == "destroyed"
    assert [j["name"] for j in vm.active_jobs] == ["fence"]
    services.projections.catch_up()
    job = services.jobs.get(job_uuid)
    assert job["execution"] == "canceled", job
    assert "destroyed while the job ran" in job["error"]
    # the worker sees its job taken away: no domain refusal, no traceback
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not any(r.exc_info for r in caplog.records)


def test_a_v2_delete_of_a_vm_quarantined_during_its_provision_whose_claimed_server_was_removed(
        services, monkeypatch):
    # its copy is where only its claim tells; that server gone, it is destroyed at once, as a
    # VM whose own server was removed is (api.md, DeleteVm), not by a job failing there
    vm_uuid = create(services, run=False)
    racing = QuarantineDuring(services, vm_uuid, "ensure_state")
    monkeypatch.setattr(services.worker, "driver", racing)
    services.worker.run_vm(vm_uuid)
    vm = services.commands.load(vm_uuid)
    assert vm.server_uuid is None and vm.claim is not None
    services.fleet.set_server_status(vm.claim["server_uuid"], "removed")
    accepted = services.commands.request_action(vm_uuid, Action.DESTROY, behaviour=NEWEST,
                                                cause=make_cause("operator"))
    assert accepted.job_uuid is None
    assert services.commands.load(vm_uuid).state == "destroyed"


def test_a_stuck_vm_the_operator_released_is_timed_again_from_its_release(services, monkeypatch):
    # one rule of "stuck since" for the check, the owner's DELETE and /stats/stuck
    services.fleet.faults.pause_workers(True)
    vm_uuid = create(services, run=False)
    later(services, services.quarantine.stuck.thresholds.transient_s + 1)
    assert services.quarantine.stuck(services.commands.load(vm_uuid)) is not None
    services.quarantine.quarantine(vm_uuid, "look at it", cause=make_cause("operator"))
    released_at = services.quarantine.stuck.clock()  # released at the check's now
    monkeypatch.setattr(Vm.Released, "create_timestamp", staticmethod(lambda: released_at))
    services.quarantine.release(vm_uuid, cause=make_cause("operator"))
    services.projections.catch_up()
    services.worker.periodic()
    assert services.commands.load(vm_uuid).state == "provisioning"  # not stuck again
    [row], _ = AnalyticsQueries(services.db).stuck(0, epoch_ms(released_at))
    assert row["since"] == rfc3339(released_at)
    accepted = services.commands.request_action(vm_uuid, Action.DESTROY, behaviour=NEWEST,
                                                cause=make_cause("owner"), owner_uuid=OWNER)
    vm = services.commands.load(vm_uuid)
    assert vm.state == "provisioning" and vm.quarantine is None  # an ordinary destroy
    assert [job["uuid"] for job in vm.active_jobs] == [accepted.job_uuid]
    services.fleet.faults.pause_workers(False)
    settle(services)
    assert services.commands.load(vm_uuid).state == "destroyed"
