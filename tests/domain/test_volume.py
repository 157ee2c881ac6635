"""The ``Volume`` aggregate and the VM's record of the addresses it booted with: given events,
when a command, then events (or a refusal)."""

from __future__ import annotations

import uuid

import pytest

from domain import chain
from domain.errors import ValidationError
from domain.volume import MAX_NETWORKS, Volume, mount_address
from tests.builders import cause, new_vm, recorded

NET_A = "5f3c7d2e-1111-4222-8333-444455556666"
NET_B = "6a4d8e3f-2222-4333-8444-555566667777"


def volume_on(**networks: str) -> Volume:
    """A volume on ``networks`` with no events pending."""
    volume = Volume.create(volume_uuid=uuid.uuid4(), name="data", cause=cause(),
                           networks=networks or None)
    volume.collect_events()
    return volume


def test_a_volume_is_created_then_attached_to_its_networks_in_one_stream():
    volume = Volume.create(volume_uuid=uuid.uuid4(), name="data", cause=cause(),
                           networks={NET_A: "10.0.0.5"})
    assert recorded(volume) == ["Created", "NetworkAttached"]
    assert (volume.networks, volume.address, volume.version) == ({NET_A: "10.0.0.5"},
                                                                 "10.0.0.5", 2)
    assert volume.chain_head != chain.GENESIS


def test_attaching_and_detaching_change_the_address_vms_mount():
    volume = volume_on(**{NET_A: "10.0.0.5"})
    assert volume.attach_network(NET_B, "2001:db8::1", cause=cause()) is True
    assert volume.address == "10.0.0.5,2001:db8::1"
    assert volume.detach_network(NET_A, cause=cause()) is True
    assert recorded(volume) == ["NetworkAttached", "NetworkDetached"]
    assert volume.address == "2001:db8::1"
    assert mount_address({}) is None


def test_a_repeated_attach_or_a_detach_of_an_absent_network_records_nothing():
    volume = volume_on(**{NET_A: "10.0.0.5"})
    assert volume.attach_network(NET_A, "10.0.0.5", cause=cause()) is False
    assert volume.detach_network(NET_B, cause=cause()) is False
    assert recorded(volume) == []


@pytest.mark.parametrize(("network", "address", "field"), [
    (NET_B, "10.0.0.300", "address"),
    (NET_B, "10.0.0.5", "address"),  # the volume has it on NET_A
    (NET_A, "10.0.0.6", "network_uuid"),  # on NET_A already, at another address
    # a zone id is any text after %: no address a VM on another host can mount (tester)
    (NET_B, "fe80::1%<img src=x>", "address"),
    (NET_B, "fe80::1%eth0", "address"),
])
def test_attach_refuses_a_bad_or_conflicting_address(network, address, field):
    volume = volume_on(**{NET_A: "10.0.0.5"})
    with pytest.raises(ValidationError) as refusal:
        volume.attach_network(network, address, cause=cause())
    assert refusal.value.errors[0]["field"] == field
    assert recorded(volume) == []


def test_a_volume_is_on_at_most_max_networks_and_a_repeat_at_the_cap_still_records_nothing():
    # found by a new user: create refused a 33rd network, attach took a 51st
    networks = {str(uuid.UUID(int=n + 1)): f"10.0.{n}.1" for n in range(MAX_NETWORKS)}
    volume = volume_on(**networks)
    with pytest.raises(ValidationError) as refusal:
        volume.attach_network(NET_A, "10.9.9.9", cause=cause())
    assert refusal.value.errors[0]["field"] == "network_uuid"
    assert str(MAX_NETWORKS) in refusal.value.errors[0]["message"]
    first = next(iter(networks))
    assert volume.attach_network(first, networks[first], cause=cause()) is False
    assert recorded(volume) == []
    assert volume.detach_network(first, cause=cause()) is True
    assert volume.attach_network(NET_A, "10.9.9.9", cause=cause()) is True


def test_a_volume_created_on_more_than_max_networks_is_refused():
    networks = {str(uuid.UUID(int=n + 1)): f"10.0.{n}.1" for n in range(MAX_NETWORKS + 1)}
    with pytest.raises(ValidationError):
        Volume.create(volume_uuid=uuid.uuid4(), name="data", cause=cause(), networks=networks)


def test_a_vm_records_the_addresses_of_the_volumes_it_mounts_and_no_others():
    mounted = str(uuid.uuid4())
    vm = new_vm(volumes=[{"volume_uuid": mounted, "mountpoint": "/data"}])
    vm.collect_events()
    assert vm.record_volume_addresses({mounted: "10.0.0.5"}, cause=cause()) is True
    assert recorded(vm) == ["VolumeAddressesRefreshed"]
    with pytest.raises(ValidationError):
        vm.record_volume_addresses({str(uuid.uuid4()): "10.0.0.6"}, cause=cause())
    bare = new_vm()
    bare.collect_events()
    assert bare.record_volume_addresses({}, cause=cause()) is False
    assert recorded(bare) == []
