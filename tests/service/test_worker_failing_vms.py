"""A VM whose load or job raises an error that is not the database's (a bug: a fold that
recursed past Python's limit on a value an older version stored) holds up no other VM's
jobs: the worker passes over it, says so once, and counts it (docs/jobs.md, "A VM that
fails"). Found by a tester: its RecursionError ended every pass, and no job of any VM ran."""

from __future__ import annotations

import pytest
from eventsourcing.persistence import OperationalError
from prometheus_client import REGISTRY

from domain.states import Action
from domain.vm import make_cause
from service.commands.application import VmSpec
from service.commands.versioning import NEWEST
from service.container import Services

OWNER = "930896af-bf8c-48d4-885c-6573a94b1853"


def _queued_vm(services: Services) -> str:
    """A VM with its provision and an update queued (no worker has run): its uuid."""
    vm_uuid = services.commands.create_vm(
        VmSpec(owner_uuid=OWNER, brand="joyent", ram=256), cause=make_cause()).vm_uuid
    services.commands.request_action(vm_uuid, Action.UPDATE, behaviour=NEWEST,
                                     cause=make_cause(), args={"alias": "later"})
    return vm_uuid


def _failing_gauge() -> float | None:
    return REGISTRY.get_sample_value("vmledger_worker_failing_vms")


def test_the_other_vms_jobs_run_and_the_failing_one_is_said_once(
        services, json_logs, monkeypatch) -> None:
    failing, healthy = _queued_vm(services), _queued_vm(services)
    services.projections.catch_up()  # the worker finds both VMs' jobs
    load = services.commands.load

    def load_but_one(vm_uuid, *args):
        if str(vm_uuid) == failing:
            raise RecursionError("maximum recursion depth exceeded")
        return load(vm_uuid, *args)

    monkeypatch.setattr(services.commands, "load", load_but_one)
    worker = services.worker
    assert worker.run_pending() == 2  # the healthy VM's two jobs
    assert worker.run_pending() == 0
    assert services.commands.load(healthy).head_job is None
    assert _failing_gauge() == 1
    said = [line for line in json_logs() if "passed over" in line["message"]]
    assert len(said) == 1, said  # two passes, one warning
    assert said[0]["level"] == "WARNING" and said[0]["vm_uuid"] == failing
    assert said[0]["message"] == (f"jobs of VM {failing} passed over: RecursionError: "
                                  "maximum recursion depth exceeded")
    monkeypatch.setattr(services.commands, "load", load)  # mended: its jobs run again
    assert worker.run_pending() == 2
    assert _failing_gauge() == 0


def test_a_database_error_still_ends_the_pass(services, monkeypatch) -> None:
    _queued_vm(services)
    services.projections.catch_up()

    def unavailable(*_args):
        raise OperationalError("connection refused")

    monkeypatch.setattr(services.commands, "load", unavailable)
    with pytest.raises(OperationalError):
        services.worker.run_pending()
