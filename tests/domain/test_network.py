"""The ``Network`` aggregate's rules (domain/network.py) and a VM's NICs (domain/vm_nics.py)."""

from __future__ import annotations

import uuid

import pytest

from domain.errors import ValidationError
from domain.network import Network, NetworkFullError, in_provisioning_range, range_counts
from domain.states import Action, VmState
from domain.vm import make_cause
from tests.builders import LEASE, T0, new_vm, vm_in


def network(start: str = "10.0.0.10", end: str = "10.0.0.12", **overrides) -> Network:
    fields = {"network_uuid": uuid.uuid4(), "name": "external", "subnet": "10.0.0.0/24",
              "provision_start_ip": start, "provision_end_ip": end, "gateway": "10.0.0.1",
              "cause": make_cause(), **overrides}
    return Network.create(**fields)


def figures(net: Network) -> tuple[int, int, int, int]:
    """``(size, in use, free, outside the range)`` of the network's claims."""
    in_use, outside = range_counts(net.provision_start_ip, net.provision_end_ip, net.claims)
    return net.size, in_use, net.size - in_use, outside


@pytest.mark.parametrize(("field", "overrides"), [
    ("subnet", {"subnet": "10.0.0.1/24"}),  # host bits set
    ("subnet", {"subnet": "nonsense"}),
    ("subnet", {"subnet": "10.0.0.0/024"}),  # CIDR's prefix length, as an address, has no 0
    ("subnet", {"subnet": "10.0.0.0/255.255.255.0"}),  # ipaddress reads a netmask too
    ("provision_start_ip", {"provision_start_ip": "10.0.1.5"}),
    ("provision_end_ip", {"provision_end_ip": "10.0.0.255"}),  # the broadcast address
    ("provision_end_ip", {"provision_start_ip": "10.0.0.20", "provision_end_ip": "10.0.0.10"}),
    ("gateway", {"gateway": "10.0.0.11"}),  # inside the range
    ("gateway", {"gateway": "192.168.0.1"}),
    ("subnet", {"subnet": "10.0.0.0/31", "provision_start_ip": "10.0.0.0",
                "provision_end_ip": "10.0.0.1", "gateway": None}),  # no host address
    ("subnet", {"subnet": "10.0.0.9/32", "provision_start_ip": "10.0.0.9",
                "provision_end_ip": "10.0.0.9", "gateway": None}),
])
def test_a_network_that_cannot_hand_out_addresses_is_refused_naming_the_field(field, overrides):
    with pytest.raises(ValidationError) as refused:
        network(**overrides)
    assert refused.value.errors[0]["field"] == field


def test_addresses_are_handed_out_lowest_first_and_never_twice() -> None:
    net = network()
    assert (figures(net), net.netmask) == ((3, 0, 3, 0), "255.255.255.0")
    first = net.next_free()
    net.claim(first, vm_uuid="a", mac="02:00:00:00:00:01", cause=make_cause())
    assert first == "10.0.0.10" and net.next_free() == "10.0.0.11"
    assert net.next_free(taken={"10.0.0.11"}) == "10.0.0.12"
    with pytest.raises(ValidationError) as taken:
        net.claim(first, vm_uuid="b", mac="02:00:00:00:00:02", cause=make_cause())
    assert taken.value.errors[0]["code"] == "Duplicate"
    for ip in ("10.0.0.11", "10.0.0.12"):
        net.claim(ip, vm_uuid="b", mac="02:00:00:00:00:03", cause=make_cause())
    assert figures(net) == (3, 3, 0, 0)
    with pytest.raises(NetworkFullError):
        net.next_free()


def test_an_address_asked_for_must_be_a_free_host_address_of_the_subnet() -> None:
    net = network()
    assert net.check_claimable("10.0.0.200") == "10.0.0.200"  # outside the range is allowed
    for ip in ("10.0.1.1", "10.0.0.0", "10.0.0.255", "10.0.0.1", "garbage"):
        with pytest.raises(ValidationError):
            net.check_claimable(ip)


def test_only_the_holder_releases_an_address() -> None:
    net = network()
    net.claim("10.0.0.10", vm_uuid="a", mac="02:00:00:00:00:01", cause=make_cause())
    assert net.release("10.0.0.10", vm_uuid="b", cause=make_cause()) is False
    assert net.release("10.0.0.10", vm_uuid="a", cause=make_cause()) is True
    assert net.release("10.0.0.10", vm_uuid="a", cause=make_cause()) is False
    assert net.claims == {} and figures(net) == (3, 0, 3, 0)


def test_a_volume_releases_the_address_it_holds_and_no_other_volumes() -> None:
    net, volume, other = network(), str(uuid.uuid4()), str(uuid.uuid4())
    net.claim_for_volume("10.0.0.20", volume_uuid=volume, cause=make_cause())
    net.claim_for_volume("10.0.0.21", volume_uuid=other, cause=make_cause())
    net.collect_events()
    net.release_for_volume(volume, cause=make_cause())
    assert net.claims == {"10.0.0.21": other}
    [released] = net.collect_events()
    assert (type(released).__name__, released.ip) == ("VolumeAddressReleased", "10.0.0.20")
    net.release_for_volume(volume, cause=make_cause())  # holds none now
    assert net.collect_events() == []


def test_the_first_nic_of_a_vm_is_primary_and_removing_it_makes_another_primary() -> None:
    vm = new_vm()
    nic = {"ip": "10.0.0.10", "netmask": "255.255.255.0", "gateway": None, "network_uuid": "n"}
    vm.add_nics([{**nic, "mac": "m1", "primary": False}, {**nic, "mac": "m2", "primary": False}],
                cause=make_cause())
    assert [n["primary"] for n in vm.nic_list] == [True, False]
    vm.add_nics([{**nic, "mac": "m3", "primary": True}], cause=make_cause())
    assert [n["primary"] for n in vm.nic_list] == [False, False, True]
    removed = vm.remove_nics(["m3"], cause=make_cause())
    assert [n["mac"] for n in removed] == ["m3"]
    assert [(n["mac"], n["primary"]) for n in vm.nic_list] == [("m1", True), ("m2", False)]
    with pytest.raises(ValidationError):
        vm.remove_nics(["nope"], cause=make_cause())


def vm_with_nics(*macs: str):
    """A VM holding a NIC of each of ``macs``, its events collected."""
    vm = new_vm()
    nic = {"ip": "10.0.0.10", "netmask": "255.255.255.0", "gateway": None, "network_uuid": "n"}
    vm.add_nics([{**nic, "mac": mac, "primary": False} for mac in macs], cause=make_cause())
    vm.collect_events()
    return vm


def test_the_nics_to_remove_are_checked_without_recording_anything() -> None:
    # A remove_nics is asked for first and recorded by its job once the server applied it.
    vm = vm_with_nics("m1", "m2")
    assert [n["mac"] for n in vm.nics_to_remove(["m2", "m1", "m2"])] == ["m2", "m1"]
    for macs in (["m1", "nope"], []):
        with pytest.raises(ValidationError) as refused:
            vm.nics_to_remove(macs)
        assert refused.value.errors[0]["field"] == "macs"
    for twice, said in ((["02:00:00:00:00:09"] * 2, "the VM has no NIC 02:00:00:00:00:09"),
                        (["zz", "m1", "zz"], "not a MAC address: zz (")):
        with pytest.raises(ValidationError) as refused:  # a MAC asked twice is named once
            vm.nics_to_remove(twice)
        assert refused.value.errors[0]["message"].startswith(said)
        assert refused.value.errors[0]["message"].count(twice[0]) == 1
    assert vm.collect_events() == [] and [n["mac"] for n in vm.nic_list] == ["m1", "m2"]


def test_a_job_removes_only_the_nics_the_vm_still_has() -> None:
    # Another job may have removed some since it was asked for; with none left it records
    # nothing (no empty NicsRemoved).
    vm = vm_with_nics("m1", "m2")
    removed = vm.remove_nics_it_has(["m2", "gone"], cause=make_cause())
    assert [n["mac"] for n in removed] == ["m2"] and [n["mac"] for n in vm.nic_list] == ["m1"]
    [event] = vm.collect_events()
    assert [n["mac"] for n in event.nics] == ["m2"]
    assert vm.remove_nics_it_has(["m2", "gone"], cause=make_cause()) == []
    assert vm.collect_events() == []


def queue_nic_job(vm, name: str, args: dict) -> str:
    """Queue an ``add_nics`` or ``remove_nics`` job, as service/commands/nic_actions.py does."""
    job_uuid = str(uuid.uuid4())
    vm.queue_job(action=Action.UPDATE, job_uuid=job_uuid, name=name,
                 params={"args": args, "if_already": "succeed"}, cause=make_cause())
    return job_uuid


def test_an_add_nics_canceled_before_it_ran_gives_back_its_nics_in_the_same_save() -> None:
    # NICs an add_nics recorded when asked for, which no node got; a remove_nics canceled
    # removes nothing (it records its NICs removed only once the node applied it)
    vm = vm_in(VmState.RUNNING)
    nic = {"ip": "10.0.0.10", "netmask": "255.255.255.0", "gateway": None, "network_uuid": "n"}
    vm.add_nics([{**nic, "mac": "kept", "primary": False}], cause=make_cause())
    vm.add_nics([{**nic, "mac": "asked", "primary": False}], cause=make_cause())
    queue_nic_job(vm, "add_nics", {"nics": [vm.nic_list[-1]]})
    queue_nic_job(vm, "remove_nics", {"macs": ["kept"]})
    vm.collect_events()
    vm.record_quarantined("look", cause=make_cause("operator"))
    events = vm.collect_events()
    assert [type(e).__name__ for e in events] == [
        "NicsRemoved", "JobCanceled", "JobCanceled", "Quarantined"]
    assert [n["mac"] for n in events[0].nics] == ["asked"]
    assert [n["mac"] for n in vm.nic_list] == ["kept"]


def test_a_running_add_nics_canceled_keeps_its_nics_until_its_fence_job_gives_them_back(
        ) -> None:
    # its call may still reach the node until the fence job has raised the VM's fence there
    # (service/jobs/fence_job.py), which then gives the NICs back
    vm = vm_in(VmState.RUNNING)
    nic = {"ip": "10.0.0.10", "netmask": "255.255.255.0", "gateway": None, "network_uuid": "n"}
    vm.add_nics([{**nic, "mac": "asked", "primary": False}], cause=make_cause())
    job_uuid = queue_nic_job(vm, "add_nics", {"nics": vm.nic_list})
    vm.start_job(job_uuid, worker="w1", now=T0, lease_expires_at=T0 + LEASE, cause=make_cause())
    vm.collect_events()
    add_nics = {"uuid": job_uuid, "name": "add_nics", "params": vm.active_job(job_uuid)["params"]}
    vm.record_quarantined("look", cause=make_cause("operator"))
    events = vm.collect_events()
    assert [type(e).__name__ for e in events] == ["JobCanceled", "Quarantined", "JobQueued"]
    assert [n["mac"] for n in vm.nic_list] == ["asked"]
    [fence] = vm.active_jobs
    assert (fence["name"], fence["params"]["args"]) == ("fence", {
        "canceled_job_uuid": job_uuid, "servers": vm.copy_servers, "macs": ["asked"],
        "canceled_job": add_nics})

    # released, then quarantined again before it ran: its duty passes to the next fence job
    vm.record_released(cause=make_cause("operator"))
    vm.record_quarantined("again", cause=make_cause("operator"))
    assert [type(e).__name__ for e in vm.collect_events()] == [
        "Released", "JobCanceled", "Quarantined", "JobQueued"]
    [after] = vm.active_jobs
    assert after["uuid"] != fence["uuid"]
    assert after["params"]["args"] == {**fence["params"]["args"],
                                       "canceled_job_uuid": fence["uuid"]}
    assert [n["mac"] for n in vm.nic_list] == ["asked"]


def test_an_address_outside_the_range_is_not_counted_in_the_range_figures() -> None:
    # Out-of-range addresses are inside the subnet but not what ``size`` counts: counting them
    # in use made the free count fall below zero (tester A, BUG 2).
    net = network()
    net.claim("10.0.0.200", vm_uuid="a", mac="02:00:00:00:00:01", cause=make_cause())
    assert figures(net) == (3, 0, 3, 1)
    for ip in ("10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.201"):
        net.claim(ip, vm_uuid="b", mac="02:00:00:00:00:02", cause=make_cause())
    assert figures(net) == (3, 3, 0, 2)
    assert in_provisioning_range(net.provision_start_ip, net.provision_end_ip, "10.0.0.12")
    assert not in_provisioning_range(net.provision_start_ip, net.provision_end_ip, "10.0.0.13")
