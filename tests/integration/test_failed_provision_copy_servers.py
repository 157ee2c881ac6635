"""A provision that a takeover fails names as possibly holding a copy only servers the VM
claimed (docs/jobs.md, "Takeovers"; ``ProvisionFailed.copy_may_be_on``).

Placement claims a server before it creates the VM there, so a copy can only be on a server
the VM held a claim on. The takeover asks every server of the fleet, and it used to count
every one that did not answer as possibly holding a copy: a server the VM never claimed,
unreachable or recorded removed at that moment, kept the failed VM's NICs, failed its v1
DeleteVm and its ``update`` (each asked that server), until that server answered again.
Now only a claimed server that did not answer does so. Worker A is paused in its
``ensure_registered`` (before the call reaches the node) while worker B takes the provision
over (``test_fencing.paused_in``); no sleeps, both backends.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from domain.states import Action
from domain.vm import Vm, make_cause
from service.jobs.run import utcnow
from service.jobs.worker import Worker
from tests.api.test_failed_provision_nics import _one_address_and_a_vm_asking_it
from tests.builders import act, job, settle, stream
from tests.integration.test_fencing import paused_in
from tests.integration.test_reconfigure_faults import claims


def rescuer(services, worker_id: str, *, max_attempts: int | None = None) -> Worker:
    """Another worker whose clock stands two leases from now, with the worker's driver (the
    fleet behind ``RecordedRemovalsRefused``, as ``vmledger work`` has it), and
    ``max_attempts`` (default: the worker's)."""
    later = utcnow() + services.worker.lease * 2
    return Worker(
        services.commands, services.worker.driver,
        find_work=services.jobs.vms_with_unfinished_jobs, placement=services.worker.placement,
        worker_id=worker_id, clock=lambda: later, lease_s=services.worker.lease.total_seconds(),
        step_attempts=services.worker.step_attempts,
        max_attempts=max_attempts or services.worker.max_attempts)


def unreachable(services, server_uuid: str) -> None:
    """The server's node does not answer (``unknown``): every call there fails."""
    services.fleet.set_server_status(server_uuid, "unknown")


def recorded_removed(services, server_uuid: str) -> None:
    """An operator recorded the server removed: the worker's driver refuses it."""
    services.commands.remove_server(server_uuid, cause=make_cause("operator"))
    services.projections.catch_up()


def failed_by_a_takeover(services, monkeypatch, before: Callable[[str], None], *,
                        max_attempts: int | None = 1) -> tuple:
    """A VM with one NIC whose provision B takes over while A is paused, ``before(claimed)``
    run first with the server the VM claimed; B, with ``max_attempts`` (default: none left
    after A's), finds no copy and fails it (with attempts left, and every server the VM
    claimed answering, it would carry on: docs/jobs.md, row P1). Returns the VM,
    the server it claimed, its network and the ``ProvisionFailed``."""
    network, _asked, accepted = _one_address_and_a_vm_asking_it(services)
    claimed: list[str] = []

    def meanwhile() -> None:
        claimed.append(services.commands.load(accepted.vm_uuid).claim["server_uuid"])
        before(claimed[0])
        assert rescuer(services, "b", max_attempts=max_attempts).run_vm(accepted.vm_uuid)

    assert paused_in(services, monkeypatch, "ensure_registered", accepted.vm_uuid,
                     meanwhile) == ["place"]
    [failed] = [e for e in stream(services, accepted.vm_uuid)
                if isinstance(e, Vm.ProvisionFailed)]
    return accepted.vm_uuid, claimed[0], str(network.id), failed


def another(services, claimed: str) -> str:
    """A server of the fleet the VM did not claim."""
    return next(s.uuid for s in services.fleet.servers() if s.uuid != claimed)


@pytest.mark.parametrize("lost", [unreachable, recorded_removed], ids=lambda f: f.__name__)
def test_a_server_the_vm_never_claimed_neither_keeps_its_nics_nor_blocks_its_delete(
        services, monkeypatch, lost):
    unrelated: list[str] = []

    def lose_another(claimed: str) -> None:
        unrelated.append(another(services, claimed))
        lost(services, unrelated[0])

    vm_uuid, claimed, network, failed = failed_by_a_takeover(services, monkeypatch,
                                                             lose_another)
    assert failed.copy_may_be_on == []
    vm = services.commands.load(vm_uuid)
    assert (vm.state, vm.nic_list, vm.copy_servers) == ("failed", [], [])
    assert claims(services, network) == {}  # the address went back with the failure

    # the unrelated server still does not answer: neither job asks it
    update = act(services, vm_uuid, Action.UPDATE, version=1, args={"alias": "renamed"})
    settle(services)
    assert job(services, update.job_uuid)["execution"] == "succeeded"
    delete = act(services, vm_uuid, Action.DESTROY, version=1).job_uuid
    settle(services)
    done = job(services, delete)
    assert done["execution"] == "succeeded", done
    assert unrelated[0] not in str(done["chain_results"])
    assert services.commands.load(vm_uuid).state == "destroyed"


def test_the_server_the_vm_claimed_still_keeps_its_nics_and_blocks_its_delete(
        services, monkeypatch):
    # B's look at the claimed server fails, its fence there goes up (the next look at the
    # node works), so B fails the provision: a copy may be on that server
    vm_uuid, claimed, network, failed = _failed_while_the_claimed_server_was_silent(
        services, monkeypatch)
    assert failed.copy_may_be_on == [claimed]
    assert "did not answer: a copy may be there" in failed.error
    vm = services.commands.load(vm_uuid)
    [nic] = vm.nic_list
    assert (vm.state, vm.copy_servers) == ("failed", [claimed])
    assert claims(services, network) == {nic["ip"]: vm_uuid}

    unreachable(services, claimed)
    delete = act(services, vm_uuid, Action.DESTROY, version=1).job_uuid
    settle(services)
    done = job(services, delete)
    assert done["execution"] == "failed", done
    assert claimed in done["error"] and "keeps its NICs" in done["error"], done["error"]
    assert claims(services, network) == {nic["ip"]: vm_uuid}

    services.fleet.set_server_status(claimed, "running")
    again = act(services, vm_uuid, Action.DESTROY, version=1).job_uuid
    settle(services)
    assert job(services, again)["execution"] == "succeeded"
    assert claims(services, network) == {}


def test_the_claimed_server_recorded_removed_neither_keeps_its_nics_nor_blocks_its_delete(
        services, monkeypatch):
    # a server recorded removed is trusted to be gone: no copy is on it (docs/jobs.md,
    # "Removed servers"), as a v2 DELETE destroying at once already trusts it
    vm_uuid, claimed, network, failed = failed_by_a_takeover(
        services, monkeypatch, lambda c: recorded_removed(services, c))
    assert failed.copy_may_be_on == []
    vm = services.commands.load(vm_uuid)
    assert (vm.state, vm.nic_list, vm.copy_servers) == ("failed", [], [])
    assert claims(services, network) == {}

    delete = act(services, vm_uuid, Action.DESTROY, version=1).job_uuid
    settle(services)
    done = job(services, delete)
    assert done["execution"] == "succeeded", done
    assert services.commands.load(vm_uuid).state == "destroyed"


def test_a_failure_stored_naming_a_server_since_recorded_removed_no_longer_blocks_its_delete(
        services, monkeypatch):
    # stored before: the claimed server did not answer, and is recorded removed later
    vm_uuid, claimed, network, failed = _failed_while_the_claimed_server_was_silent(
        services, monkeypatch)
    assert failed.copy_may_be_on == [claimed]
    [nic] = services.commands.load(vm_uuid).nic_list
    recorded_removed(services, claimed)

    update = act(services, vm_uuid, Action.UPDATE, version=1, args={"alias": "renamed"})
    delete = act(services, vm_uuid, Action.DESTROY, version=1).job_uuid
    settle(services)
    assert job(services, update.job_uuid)["execution"] == "succeeded"
    done = job(services, delete)
    assert done["execution"] == "succeeded", done
    assert [step["result"] for step in done["chain_results"]] == [
        f"server {claimed} removed: no copy to remove"]
    vm = services.commands.load(vm_uuid)
    assert (vm.state, vm.nic_list) == ("destroyed", [nic])
    assert claims(services, network) == {}


def test_a_claimed_server_recorded_removed_and_unreachable_is_not_waited_for(
        services, monkeypatch):
    # the takeover used to wait for it, lease after lease, until the stuck check (an hour)
    def gone(claimed: str) -> None:
        unreachable(services, claimed)
        recorded_removed(services, claimed)

    vm_uuid, claimed, network, failed = failed_by_a_takeover(services, monkeypatch, gone)
    assert failed.copy_may_be_on == []
    assert claims(services, network) == {}


def _failed_while_the_claimed_server_was_silent(services, monkeypatch):
    """``failed_by_a_takeover`` whose look at the claimed server fails once (its fence there
    goes up, the next look works): a copy may be on that server, so B fails the provision
    even with attempts left (placing it elsewhere could make a second copy; row P1)."""
    def claimed_does_not_answer(_claimed: str) -> None:
        services.fleet.faults.inject("inventory", "fail", 1)

    return failed_by_a_takeover(services, monkeypatch, claimed_does_not_answer,
                                max_attempts=None)
