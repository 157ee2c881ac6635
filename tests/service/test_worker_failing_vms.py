"""A VM whose load or job raises an error that is not the database's (a bug: a fold that
recursed past Python's limit on a value an older version stored) holds up no other VM's
jobs: the worker passes over it, says so once, and counts it (docs/jobs.md, "A VM that
fails"). Found by a tester: its RecursionError ended every pass, and no job of any VM ran."""

from __future__ import annotations

import pytest
from eventsourcing.persistence import OperationalError
from prometheus_client import REGISTRY

from tests.service.test_worker_damaged_streams import queued_vm


def _failing_gauge() -> float | None:
    return REGISTRY.get_sample_value("vmledger_worker_failing_vms")


def test_the_other_vms_jobs_run_and_the_failing_one_is_said_once(
        services, json_logs, monkeypatch) -> None:
    failing, healthy = queued_vm(services), queued_vm(services)
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
    queued_vm(services)
    services.projections.catch_up()

    def unavailable(*_args):
        raise OperationalError("connection refused")

    monkeypatch.setattr(services.commands, "load", unavailable)
    with pytest.raises(OperationalError):
        services.worker.run_pending()


def test_a_bug_in_a_job_is_an_error_with_its_traceback_once_per_vm_and_kind(
        services, caplog, monkeypatch) -> None:
    """A value nested too deep (RecursionError) is the log's data, a warning; any other error
    a VM's load or job raises (a TypeError in a handler) is a bug: logged at ERROR with its
    traceback when the VM first fails so, whatever its message says each pass, and counted
    (vmledger_worker_failing_vms, docs/operations.md's alert)."""
    failing = queued_vm(services)
    services.projections.catch_up()
    load, passes = services.commands.load, []

    def load_with_a_bug(vm_uuid, *args):
        if str(vm_uuid) == failing:
            passes.append(None)
            raise TypeError(f"unsupported operand (pass {len(passes)})")
        return load(vm_uuid, *args)

    monkeypatch.setattr(services.commands, "load", load_with_a_bug)
    caplog.set_level("DEBUG", logger="vmledger")
    for _ in range(3):
        services.worker.run_pending()
    said = [r for r in caplog.records if "passed over" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert said[0].levelname == "ERROR" and said[0].exc_info[0] is TypeError
    assert said[0].getMessage().startswith(f"jobs of VM {failing} passed over: TypeError: ")
    assert _failing_gauge() == 1
    caplog.clear()

    def load_too_deep(vm_uuid, *args):  # another kind of failure: said again, as a warning
        if str(vm_uuid) == failing:
            raise RecursionError("maximum recursion depth exceeded")
        return load(vm_uuid, *args)

    monkeypatch.setattr(services.commands, "load", load_too_deep)
    services.worker.run_pending()
    [said] = [r for r in caplog.records if "passed over" in r.getMessage()]
    assert said.levelname == "WARNING"
