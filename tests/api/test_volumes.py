"""Volumes: ``/volumes`` (api.md, "Endpoints"), the ``volumes`` a VM mounts, and the VMs whose
mounted addresses changed since they booted (design.md lesson 6, Triton ZAPI-793;
``GET /vms?stale_mounts=true``)."""

from __future__ import annotations

import uuid

import pytest

from domain.volume import MAX_NETWORKS
from tests.api.helpers import (
    V2, act_and_wait, assert_error, create_running_vm, create_vm, error_fields, get_vm,
    history_types, vm_body, wait_job,
)

NET_A = "5f3c7d2e-1111-4222-8333-444455556666"
NET_B = "6a4d8e3f-2222-4333-8444-555566667777"


def create_volume(client, **body) -> dict:
    """POST /volumes; asserts 201 and returns the volume object."""
    response = client.post("/volumes", json={"name": "data", **body})
    assert response.status_code == 201, response.text
    return response.json()


def volume_action(client, volume_uuid: str, action: str, **body):
    """POST /volumes/{uuid}?action=...; returns the response."""
    return client.post(f"/volumes/{volume_uuid}", params={"action": action}, json=body)


def mounting(volume_uuid: str, mountpoint: str = "/data") -> list[dict[str, str]]:
    """CreateVm's ``volumes``: mount ``volume_uuid`` at ``mountpoint``."""
    return [{"volume_uuid": volume_uuid, "mountpoint": mountpoint}]


def stale(client) -> set[str]:
    """The VMs GET /vms?stale_mounts=true lists (asserting HEAD counts the same)."""
    response = client.get("/vms", params={"stale_mounts": "true"})
    assert response.status_code == 200, response.text
    head = client.head("/vms", params={"stale_mounts": "true"})
    assert int(head.headers["x-joyent-resource-count"]) == len(response.json())
    return {vm["uuid"] for vm in response.json()}


def mount_of(client, vm_uuid: str) -> dict:
    """The VM object's only ``volumes`` entry."""
    [mount] = get_vm(client, vm_uuid)["volumes"]
    return mount


# -- the volumes themselves -----------------------------------------------------------------

def test_a_created_volume_answers_201_with_its_networks_and_the_address_vms_mount(client):
    response = client.post("/volumes", json={"name": "data", "networks": {NET_A: "10.0.0.5"}})
    assert response.status_code == 201, response.text
    volume = response.json()
    assert response.headers["Location"] == f"/volumes/{volume['uuid']}"
    assert (volume["name"], volume["networks"], volume["address"]) == (
        "data", {NET_A: "10.0.0.5"}, "10.0.0.5")
    assert volume["create_timestamp"].endswith("Z") and volume["version"] == 2
    got = client.get(f"/volumes/{volume['uuid']}")
    assert got.status_code == 200 and got.json() == volume
    assert got.headers["ETag"] == '"2"'


def test_a_volume_on_no_network_has_no_address(client):
    volume = create_volume(client)
    assert (volume["networks"], volume["address"], volume["version"]) == ({}, None, 1)


def test_list_volumes_pages_oldest_first_with_the_total_count(client):
    made = [create_volume(client, name=f"vol-{n}")["uuid"] for n in range(3)]
    everything = client.get("/volumes")
    assert [v["uuid"] for v in everything.json()] == made
    assert everything.headers["x-joyent-resource-count"] == "3"
    page = client.get("/volumes", params={"limit": 1, "offset": 1})
    assert [v["uuid"] for v in page.json()] == made[1:2]
    assert page.headers["x-joyent-resource-count"] == "3"


@pytest.mark.parametrize(("body", "field"), [
    ({}, "name"),
    ({"name": "no spaces"}, "name"),
    ({"name": "data", "networks": {NET_A: "10.0.0.300"}}, f"networks.{NET_A}"),
    ({"name": "data", "networks": {"not-a-uuid": "10.0.0.5"}}, "networks.not-a-uuid.[key]"),
    ({"name": "data", "colour": "blue"}, "colour"),
    ({"name": "data", "uuid": "nope"}, "uuid"),
    ({"name": "data", "networks": {NET_A: "fe80::1%<img src=x>"}}, f"networks.{NET_A}"),
])
@pytest.mark.parametrize(("headers", "status"), [({}, 409), (V2, 422)])
def test_create_volume_refuses_bad_fields_naming_each_and_records_nothing(
        client, services, body, field, headers, status):
    head = services.commands.head_position()
    response = client.post("/volumes", json=body, headers=headers)
    assert field in error_fields(assert_error(response, status, "ValidationFailed"))
    assert services.commands.head_position() == head


def test_a_volume_uuid_already_taken_is_a_duplicate(client):
    volume = create_volume(client)
    response = client.post("/volumes", json={"name": "other", "uuid": volume["uuid"]})
    assert error_fields(assert_error(response, 409, "ValidationFailed")) == {"uuid": "Duplicate"}


def test_an_unknown_volume_is_404_on_every_route(client):
    unknown = str(uuid.uuid4())
    assert_error(client.get(f"/volumes/{unknown}"), 404, "ResourceNotFound")
    assert_error(client.get("/volumes/not-a-uuid"), 404, "ResourceNotFound")
    response = volume_action(client, unknown, "detach_network", network_uuid=NET_A)
    assert_error(response, 404, "ResourceNotFound")


def test_an_attach_refuses_an_address_with_a_zone_id_and_records_nothing(client, services):
    volume = create_volume(client)
    head = services.commands.head_position()
    refused = volume_action(client, volume["uuid"], "attach_network", network_uuid=NET_B,
                            address="fe80::1%" + "x" * 5000)
    assert "address" in error_fields(assert_error(refused, 409, "ValidationFailed"))
    assert services.commands.head_position() == head


def test_attach_and_detach_change_the_volumes_addresses(client):
    volume = create_volume(client, networks={NET_A: "10.0.0.5"})
    attached = volume_action(client, volume["uuid"], "attach_network", network_uuid=NET_B,
                             address="192.168.7.20")
    assert attached.status_code == 202, attached.text
    assert attached.json()["networks"] == {NET_A: "10.0.0.5", NET_B: "192.168.7.20"}
    assert attached.json()["address"] == "10.0.0.5,192.168.7.20"
    detached = volume_action(client, volume["uuid"], "detach_network", network_uuid=NET_A)
    assert detached.status_code == 202, detached.text
    assert (detached.json()["networks"], detached.json()["address"]) == (
        {NET_B: "192.168.7.20"}, "192.168.7.20")
    assert client.get(f"/volumes/{volume['uuid']}").json() == detached.json()


def test_repeating_an_attach_or_a_detach_changes_nothing(client, services):
    volume = create_volume(client, networks={NET_A: "10.0.0.5"})
    head = services.commands.head_position()
    again = volume_action(client, volume["uuid"], "attach_network", network_uuid=NET_A,
                          address="10.0.0.5")
    assert again.status_code == 202 and again.json()["version"] == volume["version"]
    absent = volume_action(client, volume["uuid"], "detach_network", network_uuid=NET_B)
    assert absent.status_code == 202 and absent.json() == again.json()
    assert "x-log-position" not in absent.headers
    assert services.commands.head_position() == head


def test_an_attach_past_the_most_networks_a_volume_takes_is_refused_and_appends_nothing(
        client, services):
    # found by a new user: POST /volumes refused 33 networks, attach_network took a 51st
    networks = {str(uuid.UUID(int=n + 1)): f"10.0.{n}.1" for n in range(MAX_NETWORKS)}
    volume = create_volume(client, networks=networks)
    head = services.commands.head_position()
    refused = volume_action(client, volume["uuid"], "attach_network", network_uuid=NET_A,
                            address="10.9.9.9")
    body = assert_error(refused, 409, "ValidationFailed")
    assert error_fields(body) == {"network_uuid": "Invalid"}
    assert services.commands.head_position() == head
    assert len(client.get(f"/volumes/{volume['uuid']}").json()["networks"]) == MAX_NETWORKS


def test_volume_actions_honour_if_match(client, services):
    # found by a new user: the schema declares 412, yet If-Match was not read at all (even
    # "garbage" went ahead), so two operators' edits could silently cross
    volume = create_volume(client)
    head = services.commands.head_position()
    stale = client.post(f"/volumes/{volume['uuid']}", params={"action": "attach_network"},
                        json={"network_uuid": NET_A, "address": "10.0.0.5"},
                        headers={"If-Match": f'"{volume["version"] + 1}"'})
    assert stale.status_code == 412, stale.text
    assert stale.json()["current_version"] == volume["version"]
    assert stale.headers["ETag"] == f'"{volume["version"]}"'
    assert "volume is at version" in stale.json()["message"]
    bad = client.post(f"/volumes/{volume['uuid']}", params={"action": "detach_network"},
                      json={"network_uuid": NET_A}, headers={"If-Match": "garbage"})
    assert error_fields(bad.json()) == {"If-Match": "Invalid"}
    assert services.commands.head_position() == head
    matched = client.post(f"/volumes/{volume['uuid']}", params={"action": "attach_network"},
                          json={"network_uuid": NET_A, "address": "10.0.0.5"},
                          headers={"If-Match": f'"{volume["version"]}"'})
    assert matched.status_code == 202 and matched.json()["version"] == volume["version"] + 1


def test_a_network_is_attached_at_one_address_until_it_is_detached(client):
    volume = create_volume(client, networks={NET_A: "10.0.0.5"})
    moved = volume_action(client, volume["uuid"], "attach_network", network_uuid=NET_A,
                          address="10.0.0.6")
    assert error_fields(assert_error(moved, 409, "ValidationFailed")) == {
        "network_uuid": "Duplicate"}
    shared = volume_action(client, volume["uuid"], "attach_network", network_uuid=NET_B,
                           address="10.0.0.5")
    assert error_fields(assert_error(shared, 409, "ValidationFailed")) == {"address": "Duplicate"}


@pytest.mark.parametrize(("params", "body", "field"), [
    ({}, {"network_uuid": NET_A}, "action"),
    ({"action": "resize"}, {"network_uuid": NET_A}, "action"),
    ({"action": "attach_network"}, {"network_uuid": NET_A}, "address"),
    ({"action": "attach_network"}, {"network_uuid": "x", "address": "10.0.0.1"}, "network_uuid"),
    ({"action": "detach_network"}, {}, "network_uuid"),
    ({"action": "detach_network", "force": "true"}, {"network_uuid": NET_A}, "force"),
])
def test_volume_actions_refuse_bad_input_naming_it(client, params, body, field):
    volume = create_volume(client)
    response = client.post(f"/volumes/{volume['uuid']}", params=params, json=body)
    assert field in error_fields(assert_error(response, 409, "ValidationFailed"))


# -- VMs mounting volumes -------------------------------------------------------------------

def test_a_vm_shows_the_volumes_it_mounts_with_their_current_address(client):
    volume = create_volume(client, networks={NET_A: "10.0.0.5"})
    vm_uuid = create_running_vm(client, volumes=mounting(volume["uuid"], "/srv/data"))
    assert get_vm(client, vm_uuid)["volumes"] == [{
        "volume_uuid": volume["uuid"], "mountpoint": "/srv/data", "address": "10.0.0.5",
        "stale": False}]
    [listed] = [vm for vm in client.get("/vms").json() if vm["uuid"] == vm_uuid]
    assert listed["volumes"] == get_vm(client, vm_uuid)["volumes"]


def test_create_vm_refuses_a_volume_that_does_not_exist_naming_volumes(client, services):
    head = services.commands.head_position()
    response = client.post("/vms", json=vm_body(volumes=mounting(str(uuid.uuid4()))),
                           headers=V2)
    assert error_fields(assert_error(response, 422, "ValidationFailed")) == {
        "volumes": "Invalid"}
    assert services.commands.head_position() == head


@pytest.mark.parametrize("volumes", [
    [{"volume_uuid": "not-a-uuid", "mountpoint": "/data"}],
    [{"volume_uuid": NET_A, "mountpoint": "relative/path"}],
    [{"volume_uuid": NET_A}],
    [{"volume_uuid": NET_A, "mountpoint": "/data", "mode": "rw"}],
    [{"volume_uuid": NET_A, "mountpoint": "/data"}, {"volume_uuid": NET_B, "mountpoint": "/data/"}],
    # one directory spelt two ways (found by a tester: only a trailing / was seen)
    [{"volume_uuid": NET_A, "mountpoint": "/a/b"}, {"volume_uuid": NET_B, "mountpoint": "/a//b"}],
    [{"volume_uuid": NET_A, "mountpoint": "/a/b"}, {"volume_uuid": NET_B, "mountpoint": "//a/b"}],
    # a . or .. part: another directory than it spells, or outside the VM's root
    [{"volume_uuid": NET_A, "mountpoint": "/a/./b"}],
    [{"volume_uuid": NET_A, "mountpoint": "/a/c/../b"}],
    [{"volume_uuid": NET_A, "mountpoint": "/.."}],
    [{"volume_uuid": NET_A, "mountpoint": "/a/."}],
    [{"volume_uuid": NET_A, "mountpoint": f"/m{n}"} for n in range(17)],
])
def test_create_vm_refuses_malformed_mounts_naming_volumes(client, services, volumes):
    head = services.commands.head_position()
    response = client.post("/vms", json=vm_body(volumes=volumes))
    fields = error_fields(assert_error(response, 409, "ValidationFailed"))
    assert all(field.startswith("volumes") for field in fields), fields
    assert services.commands.head_position() == head


def test_mountpoints_with_dots_in_their_names_are_taken(client):
    one, two = create_volume(client), create_volume(client)
    response = client.post("/vms", json=vm_body(volumes=[
        {"volume_uuid": one["uuid"], "mountpoint": "/a/.b"},
        {"volume_uuid": two["uuid"], "mountpoint": "/a/..b/c..d"}]))
    assert response.status_code == 202, response.text


def test_a_repeated_create_with_a_chosen_uuid_and_the_same_volumes_returns_the_first(client):
    volume = create_volume(client)
    body = vm_body(uuid=str(uuid.uuid4()), volumes=mounting(volume["uuid"]))
    first = client.post("/vms", json=body)
    again = client.post("/vms", json=body)
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    other = client.post("/vms", json={**body, "volumes": mounting(volume["uuid"], "/other")})
    assert error_fields(assert_error(other, 409, "ValidationFailed")) == {"uuid": "Duplicate"}


def test_attaching_a_network_to_a_volume_mounted_by_three_vms_lists_them_stale_until_rebooted(
        client):
    volume = create_volume(client, networks={NET_A: "10.0.0.5"})
    mounts = [create_running_vm(client, alias=f"web-{n}", volumes=mounting(volume["uuid"]))
              for n in range(3)]
    create_running_vm(client, alias="no-volume")
    assert stale(client) == set()

    attached = volume_action(client, volume["uuid"], "attach_network", network_uuid=NET_B,
                             address="192.168.7.20")
    assert attached.status_code == 202, attached.text
    assert stale(client) == set(mounts)
    assert mount_of(client, mounts[0]) == {
        "volume_uuid": volume["uuid"], "mountpoint": "/data",
        "address": "10.0.0.5,192.168.7.20", "stale": True}

    assert act_and_wait(client, mounts[0], "reboot")["execution"] == "succeeded"
    assert stale(client) == set(mounts[1:])
    assert mount_of(client, mounts[0])["stale"] is False
    # its history shows the refresh, recorded with the reboot
    assert history_types(client, mounts[0])[-3:] == [
        "Rebooted", "VolumeAddressesRefreshed", "JobSucceeded"]
    at_provision, at_reboot = [e["data"]["addresses"] for e in
                               client.get(f"/vms/{mounts[0]}/history").json()
                               if e["type"] == "VolumeAddressesRefreshed"]
    assert at_provision == {volume["uuid"]: "10.0.0.5"}
    assert at_reboot == {volume["uuid"]: "10.0.0.5,192.168.7.20"}


def test_detaching_a_network_lists_running_mounts_stale_and_a_start_refreshes_a_stopped_one(
        client):
    volume = create_volume(client, networks={NET_A: "10.0.0.5", NET_B: "192.168.7.20"})
    running = create_running_vm(client, volumes=mounting(volume["uuid"]))
    stopped = create_running_vm(client, volumes=mounting(volume["uuid"], "/mnt/data"))
    act_and_wait(client, stopped, "stop")

    detached = volume_action(client, volume["uuid"], "detach_network", network_uuid=NET_A)
    assert detached.status_code == 202, detached.text
    # a VM that is not running mounts nothing: it is given the new address when it boots
    assert stale(client) == {running}
    assert mount_of(client, stopped) == {
        "volume_uuid": volume["uuid"], "mountpoint": "/mnt/data", "address": "192.168.7.20",
        "stale": False}

    assert act_and_wait(client, stopped, "start")["execution"] == "succeeded"
    assert "VolumeAddressesRefreshed" in history_types(client, stopped)[-3:]
    assert stale(client) == {running}
    assert act_and_wait(client, running, "reboot")["execution"] == "succeeded"
    assert stale(client) == set()


def test_a_vm_provisioned_after_a_change_boots_with_the_new_address(client):
    volume = create_volume(client)
    volume_action(client, volume["uuid"], "attach_network", network_uuid=NET_A,
                  address="10.0.0.5")
    created = create_vm(client, volumes=mounting(volume["uuid"]))
    assert wait_job(client, created["job_uuid"])["execution"] == "succeeded"
    assert mount_of(client, created["vm_uuid"]) == {
        "volume_uuid": volume["uuid"], "mountpoint": "/data", "address": "10.0.0.5",
        "stale": False}
    assert "VolumeAddressesRefreshed" in history_types(client, created["vm_uuid"])


def test_stale_mounts_is_a_boolean_filter(client):
    # found by a tester: false was no filter at all, listing the stale VMs too
    volume = create_volume(client, networks={NET_A: "10.0.0.5"})
    stale_vm = create_running_vm(client, volumes=mounting(volume["uuid"]))
    assert volume_action(client, volume["uuid"], "attach_network", network_uuid=NET_B,
                         address="192.168.7.20").status_code == 202
    fresh_vm = create_running_vm(client, volumes=mounting(volume["uuid"]))
    plain_vm = create_running_vm(client)
    for value, listed in (("true", {stale_vm}), ("1", {stale_vm}),
                          ("false", {fresh_vm, plain_vm}), ("0", {fresh_vm, plain_vm})):
        answer = client.get("/vms", params={"stale_mounts": value})
        assert {vm["uuid"] for vm in answer.json()} == listed, value
        head = client.head("/vms", params={"stale_mounts": value})
        assert head.headers["x-joyent-resource-count"] == str(len(listed)), value
    assert len(client.get("/vms").json()) == 3
    bad = client.get("/vms", params={"stale_mounts": "maybe"})
    assert error_fields(assert_error(bad, 409, "ValidationFailed")) == {"stale_mounts": "Invalid"}
