"""A VM whose stream cannot be folded (an event deleted, made undecodable, or made one its
fold cannot apply, behind the service's back) holds up no other VM's jobs: the worker passes
over it, says so once, and counts it (docs/operations.md, "A damaged stream"). Found by a
tester: its error ended every pass, and the same VM came first again the next, so no job in
the fleet ran."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from domain.states import Action
from domain.vm import make_cause
from service.commands.application import VmSpec
from service.commands.versioning import NEWEST
from service.container import Services
from tests.tampering import delete_event, delete_stream, set_event_column

OWNER = "930896af-bf8c-48d4-885c-6573a94b1853"
# Each damage of a stream of three events (Created, and two jobs queued), and its fold's words.
DAMAGES = {
    "first event deleted": (lambda s, vm: delete_event(s, vm, 1),
                            "its event of version 2 is its first"),
    "event deleted": (lambda s, vm: delete_event(s, vm, 2),
                      "its event of version 3 follows version 1"),
    "undecodable event": (lambda s, vm: set_event_column(s, vm, 2, "state", b"\xff not json"),
                          "has an unreadable event at version 2"),
    # a Started, which a provisioning VM refuses: its refusal was a failing VM's (an ERROR
    # with a traceback, a bug to report), not a damaged stream's (tester E)
    "event refused": (lambda s, vm: set_event_column(s, vm, 2, "topic", "vm.started"),
                      "has an event its fold cannot apply at version 2"),
    "whole stream deleted": (lambda s, vm: delete_stream(s, vm),
                             "is not in the log, though its jobs are"),
}


def queued_vm(services: Services) -> str:
    """A VM with its provision and an update queued (no worker has run): its uuid."""
    vm_uuid = services.commands.create_vm(
        VmSpec(owner_uuid=OWNER, brand="joyent", ram=256), cause=make_cause()).vm_uuid
    services.commands.request_action(vm_uuid, Action.UPDATE, behaviour=NEWEST,
                                     cause=make_cause(), args={"alias": "later"})
    return vm_uuid


def _damaged_gauge() -> float | None:
    return REGISTRY.get_sample_value("vmledger_worker_damaged_streams")


@pytest.mark.parametrize(("damage", "words"), DAMAGES.values(), ids=DAMAGES.keys())
def test_the_other_vms_jobs_run_and_the_damaged_one_is_said_once(
        services, settings, json_logs, damage, words) -> None:
    damaged, healthy = queued_vm(services), queued_vm(services)
    services.projections.catch_up()  # the worker finds both VMs' jobs
    damage(services, damaged)
    # a worker process started after the damage: this one decides on the folds it cached
    worker = Services.build(settings)
    try:
        assert worker.worker.run_pending() == 2  # the healthy VM's two jobs
        assert worker.worker.run_pending() == 0
        assert worker.commands.load(healthy).head_job is None
        assert _damaged_gauge() == 1
        worker.projections.catch_up()
        assert worker.jobs.vms_with_unfinished_jobs() == [damaged]  # its jobs left queued
    finally:
        worker.close()
    said = [line for line in json_logs() if "passed over" in line["message"]]
    assert len(said) == 1, said  # two passes, one warning
    assert said[0]["level"] == "WARNING" and said[0]["vm_uuid"] == damaged
    assert f"stream {damaged} " in said[0]["message"] and words in said[0]["message"]
    assert said[0]["message"].endswith("the log needs repair (vmledger audit verify names "
                                       "what is wrong)")
