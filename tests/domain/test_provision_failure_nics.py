"""A VM whose provision failed, every server a copy may be on having answered it has none,
holds no NIC: it gives back every NIC in the save that records it failed (VMAPI TRITON-394;
``Lifecycle.record_provision_failed``), so nothing is given back twice by a later destroy.
Without that answer it keeps them: a copy on a node that did not answer may still use them,
if the VM claimed that node (a copy is made only where it claimed first). A quarantine, or the failure of a VM that ran, keeps the NICs: the
VM may still have a copy on a node that uses them. Streams stored when a failed provision kept
its NICs fold as they did."""

from __future__ import annotations

import uuid

from eventsourcing.application import Application

from domain.lifecycle import CANCELED_BY_PROVISION_FAILURE
from domain.states import Action, VmState
from domain.vm import Vm
from tests.builders import LEASE, T0, cause, new_vm, queue, recorded, run_head_job

SERVER = "8b9a0ee4-0000-4000-8000-000000000001"


def nics(*macs: str) -> list[dict]:
    return [{"mac": mac, "ip": f"10.0.0.{10 + n}", "netmask": "255.255.255.0",
             "gateway": None, "network_uuid": "n", "primary": False}
            for n, mac in enumerate(macs)]


def provisioning(*macs: str) -> tuple[Vm, str]:
    """A VM created with a NIC of each of ``macs`` (as CreateVm records them), its provision
    running; its events collected."""
    vm = new_vm()
    vm.add_nics(nics(*macs), cause=cause())
    job_uuid = vm.head_job["uuid"]
    vm.start_job(job_uuid, worker="w1", now=T0, lease_expires_at=T0 + LEASE, cause=cause())
    vm.collect_events()
    return vm, job_uuid


def queue_nic_job(vm: Vm, name: str, args: dict) -> str:
    """Queue a NIC job as service/commands/nic_actions.py does (version 2 queues it behind
    the provision)."""
    job_uuid = str(uuid.uuid4())
    vm.queue_job(action=Action.UPDATE, job_uuid=job_uuid, name=name,
                 params={"args": args, "if_already": "succeed"}, cause=cause())
    return job_uuid


def test_a_failed_provision_gives_back_every_nic_in_the_save_that_records_it_failed():
    vm, job_uuid = provisioning("m1", "m2")
    vm.claim_capacity(SERVER, cause=cause())
    recorded(vm)
    vm.record_provision_failed("no room", cause=cause(), copy_may_be_on=[])
    vm.fail_job(job_uuid, "no room", cause=cause(), worker="w1")
    events = vm.collect_events()
    assert [type(e).__name__ for e in events] == [
        "CapacityReleased", "NicsRemoved", "ProvisionFailed", "JobFailed"]
    assert [nic["mac"] for nic in events[1].nics] == ["m1", "m2"]
    assert (vm.state, vm.server_uuid, vm.claim, vm.nic_list) == (
        VmState.FAILED, None, None, [])


def test_a_failed_provision_a_node_may_still_have_a_copy_of_keeps_its_nics():
    # a server did not answer (unknown), or removing the copy failed: the copy may still be
    # configured with the addresses, so they stay the VM's until its destroy removed it, and an
    # add_nics queued behind the provision stays queued (as before failures gave NICs back)
    vm, job_uuid = provisioning("m1", "m2")
    vm.claim_capacity(SERVER, cause=cause())
    add = queue_nic_job(vm, "add_nics", {"nics": nics("m3")})
    recorded(vm)
    vm.record_provision_failed("no room", cause=cause(), copy_may_be_on=[SERVER])
    vm.fail_job(job_uuid, "no room", cause=cause(), worker="w1")
    assert [type(e).__name__ for e in vm.collect_events()] == [
        "CapacityReleased", "ProvisionFailed", "JobFailed"]
    assert (vm.state, vm.server_uuid, vm.claim) == (VmState.FAILED, None, None)
    assert vm.copy_servers == [SERVER]  # its destroy removes the copy there
    assert [nic["mac"] for nic in vm.nic_list] == ["m1", "m2"]
    assert [job["uuid"] for job in vm.active_jobs] == [add]


def test_a_server_the_vm_never_claimed_is_not_where_a_copy_may_be():
    # a takeover asks the whole fleet; placement claims before it creates the VM, so an
    # unrelated server that did not answer keeps nothing, as the claimed one would
    vm, _ = provisioning("m1")
    vm.claim_capacity(SERVER, cause=cause())
    recorded(vm)
    vm.record_provision_failed("lost", cause=cause(), copy_may_be_on=["unrelated", SERVER])
    [failed] = [e for e in vm.collect_events() if isinstance(e, Vm.ProvisionFailed)]
    assert failed.copy_may_be_on == [SERVER] and vm.copy_servers == [SERVER]
    assert [nic["mac"] for nic in vm.nic_list] == ["m1"]
    unclaimed, _ = provisioning("m2")
    unclaimed.record_provision_failed("lost", cause=cause(), copy_may_be_on=["unrelated"])
    assert "NicsRemoved" in recorded(unclaimed)
    assert (unclaimed.copy_servers, unclaimed.nic_list) == ([], [])


def test_a_failed_provision_stored_naming_an_unclaimed_server_asks_it_nothing():
    # as a takeover recorded it before: the server named though the VM never claimed it
    vm, _ = provisioning("m1")
    vm.claim_capacity(SERVER, cause=cause())
    vm.release_capacity(cause=cause())
    vm.trigger_event(Vm.ProvisionFailed, cause=cause(), error="lost",
                     copy_may_be_on=["unrelated", SERVER])
    assert vm.copy_servers == [SERVER]


def test_an_add_nics_queued_behind_the_failed_provision_is_canceled_its_nics_given_back():
    # Its NICs were recorded when asked for; the VM gives them back with the others, so the
    # job would add nothing: it ends canceled rather than 'succeeded' on a VM without them.
    # A remove_nics's target holds once the NICs are gone: it stays queued.
    vm, _ = provisioning("m1")
    vm.add_nics(nics("m2"), cause=cause())
    add = queue_nic_job(vm, "add_nics", {"nics": vm.nic_list[-1:]})
    remove = queue_nic_job(vm, "remove_nics", {"macs": ["m1"]})
    recorded(vm)
    vm.record_provision_failed("no room", cause=cause(), copy_may_be_on=[])
    events = vm.collect_events()
    assert [type(e).__name__ for e in events] == ["NicsRemoved", "JobCanceled",
                                                  "ProvisionFailed"]
    assert [nic["mac"] for nic in events[0].nics] == ["m1", "m2"]
    assert (events[1].job_uuid, events[1].reason) == (add, CANCELED_BY_PROVISION_FAILURE)
    assert [job["uuid"] for job in vm.active_jobs[1:]] == [remove]
    assert vm.nic_list == []


def test_a_vm_whose_provision_failed_gives_nothing_back_twice():
    vm = new_vm()  # no NIC: the failure records none given back
    run_head_job(vm, lambda v: v.record_provision_failed("no room", cause=cause(),
                                                         copy_may_be_on=[]))
    assert "NicsRemoved" not in recorded(vm)
    vm, job_uuid = provisioning("m1")
    vm.record_provision_failed("no room", cause=cause(), copy_may_be_on=[])
    vm.fail_job(job_uuid, "no room", cause=cause(), worker="w1")
    recorded(vm)
    queue(vm, Action.DESTROY)
    run_head_job(vm, lambda v: v.record_destroyed(cause=cause()))
    assert "NicsRemoved" not in recorded(vm)  # the change loop releases vm.nic_list: none
    assert vm.nic_list == []


def test_a_quarantine_and_a_running_vms_failure_keep_the_nics():
    # A provision canceled by a quarantine may have left a copy on the server it claimed, and
    # the release queues it again; a VM that ran and failed keeps its server and its copy.
    vm, _ = provisioning("m1")
    vm.record_quarantined("stuck", cause=cause("operator"))
    vm.record_released(cause=cause("operator"))
    assert "NicsRemoved" not in recorded(vm)
    assert [nic["mac"] for nic in vm.nic_list] == ["m1"] and vm.state is VmState.PROVISIONING
    running, _ = provisioning("m2")
    running.record_provisioned(SERVER, cause=cause())
    running.record_failed("crashed", "guest panic", cause=cause())
    assert "NicsRemoved" not in recorded(running)
    assert [nic["mac"] for nic in running.nic_list] == ["m2"]


def test_a_stream_stored_when_a_failed_provision_kept_its_nics_folds_with_them():
    vm = new_vm()
    vm.add_nics(nics("m1"), cause=cause())
    # as record_provision_failed recorded it before: ProvisionFailed alone, as class
    # version 1 stored it (no copy_may_be_on: read as none, its destroy asks no node)
    run_head_job(vm, lambda v: v.trigger_event(Vm.ProvisionFailed, cause=cause(),
                                               error="no room", copy_may_be_on=[]))
    app = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    app.save(vm)
    [failed] = [stored for stored in app.recorder.select_events(vm.id)
                if stored.topic.endswith("vm.provision_failed")]
    state = app.mapper.transcoder.decode(failed.state)
    del state["copy_may_be_on"], state["class_version"]
    assert Vm.ProvisionFailed.class_version == 2
    old = app.mapper.to_domain_event(type(failed)(
        originator_id=failed.originator_id, originator_version=failed.originator_version,
        topic=failed.topic, state=app.mapper.transcoder.encode(state)))
    assert old.copy_may_be_on == []
    folded = app.repository.get(vm.id)
    assert folded.state is VmState.FAILED
    assert [nic["mac"] for nic in folded.nic_list] == ["m1"]
    assert folded.copy_servers == []
    assert vars(folded) == vars(vm)
