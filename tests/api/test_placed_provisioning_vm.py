"""A provisioning VM whose provision has claimed a server (``CapacityClaimed``) but not yet
created it there: the VM object names that server, as VMAPI's createVm stores the VM with the
server it allocated before the provision job runs (sdc-vmapi ``lib/endpoints/vms.js``
createVm). GetVm, ListVms' filter, sort and markers, the changes and a rebuild of ``vm_view``
all agree; the domain's ``server_uuid`` (what the jobs and the takeovers read) stays unset
until ``Provisioned``. Version 1 DeleteVm of such a VM is VMAPI's: a destroy job, not
``UnallocatedVM`` (docs/api.md, "Contract: DeleteVm and actions")."""

from __future__ import annotations

import json
from typing import Any

from service.changes.records import ChangeFolder
from tests.api.helpers import act, assert_error, create_vm, get_vm, sim_row, wait_job
from tests.integration.test_fencing import paused_in
from tests.projections.test_rebuild import tables


def _claimed(http, vm_uuid: str) -> str:
    """The server the VM's ``CapacityClaimed`` names (its history)."""
    history = http.get(f"/vms/{vm_uuid}/history").json()
    [server] = [e["data"]["server_uuid"] for e in history if e["type"] == "CapacityClaimed"]
    return server


def _listed(http, **params: Any) -> list[str]:
    response = http.get("/vms", params=params)
    assert response.status_code == 200, response.text
    return [vm["uuid"] for vm in response.json()]


def test_a_provisioning_vm_shows_the_server_its_provision_claimed(
        paused, services, monkeypatch) -> None:
    http = paused.http
    created = create_vm(http)
    vm_uuid = created["vm_uuid"]
    other = create_vm(http)["vm_uuid"]  # not placed: its worker never runs
    head = services.commands.head_position()
    seen: dict[str, Any] = {}

    def meanwhile() -> None:
        server = seen["server"] = _claimed(http, vm_uuid)
        assert services.commands.load(vm_uuid).server_uuid is None  # the domain's: unset
        vm = get_vm(http, vm_uuid)
        assert (vm["state"], vm["server_uuid"]) == ("provisioning", server)
        assert get_vm(http, other)["server_uuid"] is None
        assert _listed(http, server_uuid=server) == [vm_uuid]
        count = http.head("/vms", params={"server_uuid": server})
        assert count.headers["x-joyent-resource-count"] == "1"
        # sorted by server, the placed VM after the unplaced one (no server sorts first), and
        # a VMAPI marker naming its server and uuid ends the list
        assert _listed(http, sort="server_uuid", state="provisioning") == [other, vm_uuid]
        marker = json.dumps({"uuid": other, "server_uuid": None})
        assert _listed(http, sort="server_uuid", state="provisioning",
                       marker=marker) == [vm_uuid]
        assert _listed(http, sort="server_uuid", state="provisioning",
                       marker=json.dumps({"uuid": vm_uuid, "server_uuid": server})) == []
        # a rebuild folds the log to the same rows
        assert services.projections.wait_for(services.commands.head_position(),
                                             ("vm_view",), timeout=10)
        live = tables(services)
        services.projections.rebuild(["vm_view"])
        assert tables(services) == live

    assert paused_in(services, monkeypatch, "ensure_registered", vm_uuid,
                     meanwhile) == ["place", "ensure_registered", "ensure_state"]
    assert wait_job(http, created["job_uuid"])["execution"] == "succeeded"
    assert get_vm(http, vm_uuid)["server_uuid"] == seen["server"]
    # the changes say the server changed when the claim was recorded, not again when the VM
    # got there
    appended = services.app.recorder.select_notifications(head, 100, inclusive_of_start=False)
    changes = [c for c in ChangeFolder(services.app).fold(appended) if c.uuid == vm_uuid]
    moved = [c.type for c in changes if "server_uuid" in c.changed]
    assert moved == ["CapacityClaimed"], [(c.type, c.changed) for c in changes]
    [claimed] = [c for c in changes if c.type == "CapacityClaimed"]
    assert claimed.server_uuid == seen["server"]
    assert json.loads(claimed.data)["server_uuid"] == seen["server"]


def test_v1_delete_of_a_placed_provisioning_vm_is_a_destroy_job_behind_its_provision(
        paused, services, monkeypatch) -> None:
    # VMAPI's deleteVm refuses only a VM with no server_uuid, and a provisioning VM has the
    # one createVm allocated: 202 and a destroy job (as version 2's, behind the provision)
    http = paused.http
    created = create_vm(http)
    vm_uuid = created["vm_uuid"]
    seen: dict[str, Any] = {}

    def meanwhile() -> None:
        refused = assert_error(act(http, vm_uuid, "stop"), 409, "UnallocatedVM")
        assert refused["allowed_actions"] == ["destroy", "quarantine"], refused
        deleted = http.delete(f"/vms/{vm_uuid}")
        assert deleted.status_code == 202, deleted.text
        seen["destroy"] = deleted.json()["job_uuid"]
        vm = get_vm(http, vm_uuid)
        assert vm["active_job_uuid"] == created["job_uuid"]  # the provision runs on
        assert vm["queued_job_uuids"] == [seen["destroy"]]

    paused_in(services, monkeypatch, "ensure_registered", vm_uuid, meanwhile)
    paused.run_jobs()
    assert wait_job(http, created["job_uuid"])["execution"] == "succeeded"
    destroy = wait_job(http, seen["destroy"])
    assert destroy["execution"] == "succeeded", destroy
    assert [step["name"] for step in destroy["chain_results"]] == ["unregister"]
    assert get_vm(http, vm_uuid)["state"] == "destroyed"
    assert sim_row(services, vm_uuid) is None


def test_v1_delete_of_a_provisioning_vm_not_yet_placed_stays_unallocated(paused) -> None:
    vm_uuid = create_vm(paused.http)["vm_uuid"]
    assert get_vm(paused.http, vm_uuid)["server_uuid"] is None
    body = assert_error(paused.http.delete(f"/vms/{vm_uuid}"), 409, "UnallocatedVM")
    assert body["message"] == "Cannot delete a VM with no server_uuid"
    assert body["allowed_actions"] == ["quarantine"]
