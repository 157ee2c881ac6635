"""A VM whose copy may be on two servers (``Vm.copy_servers``: its server, and the one it holds
a claim on), one of them removed: the jobs that must find the copy ask the live one and pass
over the removed one (docs/jobs.md), so the VM can still be deleted and updated. Every server
removed, they fail there as before (api.md, DeleteVm v1: "a destroy job that fails").

The VM: running on S1 when S1's host rebooted; the host-reboot policy's start placed it anew
on S2 (a claim, its copy created there) and was canceled by a quarantine before its boot, so
``server_uuid`` is S1 and the claim S2. (A boot that landed is adopted by the quarantine's
fence job, which records the ``Started`` on S2: docs/jobs.md, "A quarantine while a job
runs".)
"""

from __future__ import annotations

import pytest

from domain.states import Action
from domain.vm import make_cause
from service.commands.versioning import NEWEST, OLDEST
from tests.builders import settle
from tests.integration.test_agents import report, running_vm
from tests.integration.test_quarantine import QuarantineDuring

OPERATOR = make_cause("operator")


def removed_by_its_node(services, server_uuid: str) -> None:
    services.fleet.set_server_status(server_uuid, "removed")


def removed_by_an_operator(services, server_uuid: str) -> None:
    services.commands.remove_server(server_uuid, cause=OPERATOR)
    services.projections.catch_up()  # the worker reads removals from server_view


REMOVALS = {"reported by the fleet": removed_by_its_node,
            "recorded by an operator": removed_by_an_operator}


def copy_on_another_server(services, monkeypatch) -> tuple[str, str, str]:
    """The VM of the module's docstring, quarantined; returns (vm, S1, S2)."""
    vm_uuid = running_vm(services)
    first = services.commands.load(vm_uuid).server_uuid
    second = next(s.uuid for s in services.fleet.servers() if s.uuid != first)
    monkeypatch.setattr(services.worker, "placement", lambda _vm: [second])
    services.fleet.reboot_server(first)
    assert report(services, first) == {vm_uuid: "host_reboot"}  # queues the policy's start
    racing = QuarantineDuring(services, vm_uuid, "ensure_registered")  # its copy on S2
    monkeypatch.setattr(services.worker, "driver", racing)
    services.worker.run_vm(vm_uuid)
    monkeypatch.undo()
    assert racing.landed
    vm = services.commands.load(vm_uuid)
    assert (vm.state, vm.server_uuid, vm.claim["server_uuid"]) == ("quarantined", first, second)
    assert vm.copy_servers == [first, second]
    assert vm_uuid in services.fleet.inventory(second)
    return vm_uuid, first, second


@pytest.mark.parametrize("remove", REMOVALS.values(), ids=REMOVALS.keys())
@pytest.mark.parametrize("behaviour", [OLDEST, NEWEST], ids=["v1", "v2"])
def test_a_delete_of_a_vm_whose_server_was_removed_but_whose_claimed_server_lives_removes_its_copy(
        services, monkeypatch, behaviour, remove):
    vm_uuid, first, second = copy_on_another_server(services, monkeypatch)
    remove(services, first)
    accepted = services.commands.request_action(vm_uuid, Action.DESTROY, behaviour=behaviour,
                                                cause=OPERATOR)
    assert accepted.job_uuid is not None  # a copy lives: a job removes it
    settle(services)
    job = services.jobs.get(accepted.job_uuid)
    assert job["execution"] == "succeeded", job
    steps = [(step["name"], step["result"], step.get("error")) for step in job["chain_results"]]
    assert steps == [("unregister", f"server {first} removed: no copy to remove", None),
                     ("unregister", None, None)]
    assert services.commands.load(vm_uuid).state == "destroyed"
    assert vm_uuid not in services.fleet.inventory(second)


@pytest.mark.parametrize("remove", REMOVALS.values(), ids=REMOVALS.keys())
def test_an_update_of_a_vm_whose_server_was_removed_but_whose_claimed_server_lives_changes_the_copy(
        services, monkeypatch, remove):
    vm_uuid, first, second = copy_on_another_server(services, monkeypatch)
    services.quarantine.release(vm_uuid, cause=OPERATOR)  # failed again, as it was
    remove(services, first)
    accepted = services.commands.request_action(vm_uuid, Action.UPDATE, behaviour=NEWEST,
                                                args={"alias": "renamed"}, cause=OPERATOR)
    settle(services)
    job = services.jobs.get(accepted.job_uuid)
    assert job["execution"] == "succeeded", job
    steps = [(step["name"], step["result"], step.get("error")) for step in job["chain_results"]]
    assert steps == [("update_metadata", f"server {first} removed: no copy to change", None),
                     ("update_metadata", ["alias"], None)]
    assert services.commands.load(vm_uuid).alias == "renamed"
    assert services.fleet.config(second, vm_uuid)["alias"] == "renamed"


@pytest.mark.parametrize("remove", REMOVALS.values(), ids=REMOVALS.keys())
def test_a_v1_delete_of_a_vm_whose_every_copy_server_was_removed_still_fails_there(
        services, monkeypatch, remove):
    vm_uuid, first, second = copy_on_another_server(services, monkeypatch)
    remove(services, first)
    remove(services, second)
    accepted = services.commands.request_action(vm_uuid, Action.DESTROY, behaviour=OLDEST,
                                                cause=OPERATOR)
    settle(services)
    job = services.jobs.get(accepted.job_uuid)
    assert job["execution"] == "failed"
    assert job["chain_results"][-1]["error"] == f"server {first} is removed"
    assert services.commands.load(vm_uuid).state == "quarantined"
