"""Networks and NICs over HTTP (api.md ``/networks``, CreateVm ``networks``, ``add_nics`` and
``remove_nics``; service/commands/networks.py)."""

from __future__ import annotations

import pytest

from domain.errors import InvalidTransitionError, UnallocatedVmError
from domain.vm import make_cause
from service.commands.application import VmSpec
from service.commands.networks import NicRequest
from service.commands.nic_actions import change_nics
from service.commands.versioning import NEWEST, OLDEST
from tests.api.helpers import (
    OWNER,
    act,
    assert_error,
    create_running_vm,
    create_vm,
    error_fields,
    get_vm,
    history_types,
    sim_row,
    wait_job,
)


def make_network(client, name: str = "external", subnet: str = "10.2.0.0/28",
                 start: str = "10.2.0.2", end: str = "10.2.0.5",
                 gateway: str = "10.2.0.1") -> dict:
    response = client.post("/networks", json={"name": name, "subnet": subnet,
                                              "provision_start_ip": start,
                                              "provision_end_ip": end, "gateway": gateway})
    assert response.status_code == 201, response.text
    return response.json()


def in_use(client, network: dict) -> int:
    return client.get(f"/networks/{network['uuid']}").json()["addresses_in_use"]


def test_a_network_is_created_listed_and_read_with_its_counts(client) -> None:
    network = make_network(client)
    assert network["addresses_total"] == 4 and network["addresses_free"] == 4
    assert network["netmask"] == "255.255.255.240"
    assert client.get("/networks").json() == [network]
    assert client.get("/networks", params={"name": "external"}).json() == [network]
    assert client.get("/networks", params={"name": "other"}).json() == []
    assert client.get(f"/networks/{network['uuid']}").json() == network
    assert_error(client.get("/networks/6e1f0c3a-0000-4000-8000-000000000000"), 404,
                 "ResourceNotFound")
    bad = client.post("/networks", json={"name": "x", "subnet": "10.3.0.0/24",
                                         "provision_start_ip": "10.3.0.9",
                                         "provision_end_ip": "10.3.0.2"})
    assert error_fields(assert_error(bad, 409, "ValidationFailed")) == {
        "provision_end_ip": "Invalid"}


def test_create_vm_takes_networks_in_each_vmapi_form_and_get_vm_has_the_nics(client) -> None:
    network = make_network(client)
    created = create_vm(client, networks=[
        network["uuid"], {"name": "external", "primary": True},
        {"uuid": network["uuid"], "ip": "10.2.0.5"},
        {"ipv4_uuid": network["uuid"], "ipv4_count": 1}])
    nics = get_vm(client, created["vm_uuid"])["nics"]
    assert [n["ip"] for n in nics] == ["10.2.0.2", "10.2.0.3", "10.2.0.5", "10.2.0.4"]
    assert [n["primary"] for n in nics] == [False, True, False, False]
    assert {n["network_uuid"] for n in nics} == {network["uuid"]}
    assert all(n["netmask"] == "255.255.255.240" and n["gateway"] == "10.2.0.1" for n in nics)
    assert len({n["mac"] for n in nics}) == 4
    assert in_use(client, network) == 4
    assert "NicsAdded" in history_types(client, created["vm_uuid"])


def test_networks_as_a_comma_separated_string_of_uuids_or_names_are_taken_by_both(
        client) -> None:
    network = make_network(client)
    other = make_network(client, name="internal", subnet="10.4.0.0/28", start="10.4.0.2",
                         end="10.4.0.5", gateway="10.4.0.1")
    one = create_vm(client, networks=network["uuid"])  # 36 characters: one uuid
    assert [n["network_uuid"] for n in get_vm(client, one["vm_uuid"])["nics"]] == [
        network["uuid"]]
    two = create_vm(client, networks=f"{network['uuid']},internal")
    assert [n["network_uuid"] for n in get_vm(client, two["vm_uuid"])["nics"]] == [
        network["uuid"], other["uuid"]]
    vm_uuid = create_running_vm(client)
    added = act(client, vm_uuid, "add_nics", json={"networks": other["uuid"]})
    assert added.status_code == 202, added.text
    assert wait_job(client, added.json()["job_uuid"])["execution"] == "succeeded"
    assert [n["network_uuid"] for n in get_vm(client, vm_uuid)["nics"]] == [other["uuid"]]
    # each form keeps its bound: 32 networks, in a list or in a string
    for networks in ([network["uuid"]] * 33, ",".join([network["uuid"]] * 33)):
        for response in (client.post("/vms", json={"owner_uuid": OWNER, "brand": "joyent",
                                                     "ram": 128, "networks": networks}),
                         act(client, vm_uuid, "add_nics", json={"networks": networks})):
            body = assert_error(response, 409, "ValidationFailed")
            assert body["errors"][0]["field"] == "networks"


def test_bad_networks_are_refused_with_vmapis_words_and_nothing_is_claimed(client) -> None:
    network = make_network(client)
    cases = [
        ([{"uuid": network["uuid"], "primary": True}, {"name": "external", "primary": True}],
         "Cannot specify more than one primary network"),
        ([{"uuid": network["uuid"], "ipv4_uuid": network["uuid"]}],
         "Network object uses both old uuid form and new ipvX_uuid form"),
        ([{"ipv4_uuid": network["uuid"], "ipv4_count": 2}], "ipv4_count must be set to one"),
        ([{"ipv4_uuid": network["uuid"], "ipv4_ips": ["1.2.3.4", "1.2.3.5"]}],
         "ipv4_ips may only have a single entry"),
        ([{"ipv6_uuid": network["uuid"]}], "IPv6 options are not currently supported"),
        ([{"primary": True}], "Network object must specify a UUID or a name"),
        ([{"uuid": "nope"}], "Invalid uuid nope"),
        (["nowhere"], "network nowhere not found"),
        ([{"uuid": network["uuid"], "ip": "10.9.9.9"}], ("10.9.9.9 is not a host address of "
                                                        "10.2.0.0/28")),
    ]
    for networks, message in cases:
        body = assert_error(client.post("/vms", json={"owner_uuid": OWNER, "brand": "joyent",
                                                      "ram": 128, "networks": networks}),
                            409, "ValidationFailed")
        assert body["errors"][0]["field"] == "networks", networks
        assert body["errors"][0]["message"] == message, networks
    assert in_use(client, network) == 0
    assert client.get("/vms").json() == []


def test_a_full_network_refuses_the_create_and_an_address_is_never_given_twice(client) -> None:
    network = make_network(client, start="10.2.0.2", end="10.2.0.3")
    first = create_vm(client, networks=[network["uuid"]])
    taken = get_vm(client, first["vm_uuid"])["nics"][0]["ip"]
    twice = client.post("/vms", json={"owner_uuid": OWNER, "brand": "joyent", "ram": 128,
                                      "networks": [{"uuid": network["uuid"], "ip": taken}]})
    assert assert_error(twice, 409, "ValidationFailed")["errors"][0]["code"] == "Duplicate"
    create_vm(client, networks=[network["uuid"]])
    full = client.post("/vms", json={"owner_uuid": OWNER, "brand": "joyent", "ram": 128,
                                     "networks": [network["uuid"]]})
    assert "no free address" in assert_error(full, 409, "ValidationFailed")["errors"][0][
        "message"]
    assert in_use(client, network) == 2



def test_addresses_outside_the_range_are_counted_apart_and_free_never_goes_negative(
        client) -> None:
    # tester A, BUG 2: an explicit address outside the range was counted in use, so two
    # automatic claims of a two-address range left ``addresses_free`` at -1
    network = make_network(client, start="10.2.0.2", end="10.2.0.3")
    create_vm(client, networks=[{"uuid": network["uuid"], "ip": "10.2.0.12"}])
    vm_uuid = create_running_vm(client)
    added = act(client, vm_uuid, "add_nics",
                json={"networks": [{"ipv4_uuid": network["uuid"], "ipv4_ips": ["10.2.0.13"]}]})
    assert wait_job(client, added.json()["job_uuid"])["execution"] == "succeeded"

    def figures() -> tuple[int, int, int, int]:
        read = client.get(f"/networks/{network['uuid']}").json()
        assert client.get("/networks").json() == [read]
        return (read["addresses_total"], read["addresses_in_use"], read["addresses_free"],
                read["addresses_outside_range"])

    assert figures() == (2, 0, 2, 2)
    create_vm(client, networks=[network["uuid"]])
    create_vm(client, networks=[network["uuid"]])
    assert figures() == (2, 2, 0, 2)

def test_add_nics_and_remove_nics_change_the_nics_and_the_claims(client) -> None:
    network = make_network(client)
    vm_uuid = create_running_vm(client)
    added = act(client, vm_uuid, "add_nics", json={"networks": [{"name": "external"}]})
    assert added.status_code == 202, added.text
    job = wait_job(client, added.json()["job_uuid"])
    assert (job["name"], job["execution"]) == ("add_nics", "succeeded")
    nics = get_vm(client, vm_uuid)["nics"]
    assert [(n["ip"], n["primary"]) for n in nics] == [("10.2.0.2", True)]
    assert in_use(client, network) == 1
    unknown = act(client, vm_uuid, "remove_nics", json={"macs": ["02:00:00:00:00:00"]})
    assert error_fields(assert_error(unknown, 409, "ValidationFailed")) == {"macs": "Invalid"}
    removed = act(client, vm_uuid, "remove_nics", json={"macs": [nics[0]["mac"]]})
    job = wait_job(client, removed.json()["job_uuid"])
    assert (job["name"], job["execution"]) == ("remove_nics", "succeeded")
    assert get_vm(client, vm_uuid)["nics"] == []
    assert in_use(client, network) == 0


def test_a_repeated_remove_nics_returns_the_queued_job_and_a_repeated_add_nics_adds_again(
        paused, services) -> None:
    http = paused.http
    network = make_network(http)
    created = create_vm(http, networks=[network["uuid"], network["uuid"]])
    paused.run_jobs()
    vm_uuid = created["vm_uuid"]
    first_mac, second_mac = [n["mac"] for n in get_vm(http, vm_uuid)["nics"]]
    first = act(http, vm_uuid, "remove_nics", json={"macs": [first_mac]})
    assert first.status_code == 202, first.text
    head = services.commands.head_position()
    again = act(http, vm_uuid, "remove_nics", json={"macs": [first_mac]})
    assert again.status_code == 202, again.text
    assert again.json()["job_uuid"] == first.json()["job_uuid"]
    assert services.commands.head_position() == head  # appended nothing
    other = act(http, vm_uuid, "remove_nics", json={"macs": [second_mac]})  # other args
    assert other.json()["job_uuid"] != first.json()["job_uuid"]
    # with another job queued after it, a repeat is a new job: the last intent wins
    between = act(http, vm_uuid, "remove_nics", json={"macs": [first_mac]})
    assert between.json()["job_uuid"] not in (first.json()["job_uuid"], other.json()["job_uuid"])
    # an add_nics asks for one more NIC each time: a repeat adds another, no merging
    added = [act(http, vm_uuid, "add_nics", json={"networks": [network["uuid"]]})
             for _ in range(2)]
    assert added[0].json()["job_uuid"] != added[1].json()["job_uuid"]
    paused.run_jobs()
    jobs = [first, other, between, *added]
    assert [wait_job(http, j.json()["job_uuid"])["execution"] for j in jobs] == [
        "succeeded"] * 5
    assert history_types(http, vm_uuid).count("NicsRemoved") == 2  # one per NIC removed
    assert len(get_vm(http, vm_uuid)["nics"]) == 2  # the two added


def _network_and_provisioning_vm(services):
    """A network of two addresses (10.4.0.2-3) and a VM still provisioning (no worker runs)."""
    network, _ = services.commands.create_network(
        name="n", subnet="10.4.0.0/29", provision_start_ip="10.4.0.2",
        provision_end_ip="10.4.0.3", gateway=None, cause=make_cause())
    vm_uuid = services.commands.create_vm(VmSpec(owner_uuid=OWNER, brand="joyent", ram=128),
                                          cause=make_cause()).vm_uuid
    return network, vm_uuid


def test_nic_actions_on_a_provisioning_vm_are_unallocated_in_version_1_queued_in_2(
        services) -> None:
    # no worker runs here: the VM stays provisioning
    network, vm_uuid = _network_and_provisioning_vm(services)
    asked = [NicRequest(str(network.id))]
    with pytest.raises(UnallocatedVmError):
        change_nics(services.commands, vm_uuid, behaviour=OLDEST, cause=make_cause(), add=asked)
    assert services.commands.load_network(network.id).claims == {}
    queued = change_nics(services.commands, vm_uuid, behaviour=NEWEST, cause=make_cause(),
                         add=asked)
    vm = services.commands.load(vm_uuid)
    assert [job["name"] for job in vm.active_jobs] == ["provision", "add_nics"]
    assert vm.active_jobs[1]["uuid"] == queued.job_uuid
    assert services.commands.load_network(network.id).claims == {"10.4.0.2": vm_uuid}


def test_nic_actions_on_a_vm_whose_state_refuses_an_update_are_invalid_transitions(
        services) -> None:
    network, vm_uuid = _network_and_provisioning_vm(services)
    services.quarantine.quarantine(vm_uuid, "troubleshooting", cause=make_cause("operator"))
    for change in ({"add": [NicRequest(str(network.id))]}, {"remove": ["02:00:00:00:00:00"]}):
        with pytest.raises(InvalidTransitionError) as refused:
            change_nics(services.commands, vm_uuid, behaviour=NEWEST, cause=make_cause(),
                        **change)
        assert (refused.value.action, refused.value.allowed_actions) == (
            "add_nics" if "add" in change else "remove_nics", ["destroy", "quarantine", "release"])
    assert services.commands.load_network(network.id).claims == {}
    assert services.commands.load(vm_uuid).active_jobs == []


def test_bad_create_and_update_bodies_carry_vmapis_top_level_messages(client) -> None:
    missing = client.post("/vms", json={"owner_uuid": OWNER})
    assert assert_error(missing, 409, "ValidationFailed")["message"] == "Invalid VM parameters"
    no_network = client.post("/vms", json={"owner_uuid": OWNER, "brand": "joyent", "ram": 128,
                                           "networks": ["nowhere"]})
    assert assert_error(no_network, 409, "ValidationFailed")["message"] == \
        "Invalid VM parameters"
    vm_uuid = create_vm(client)["vm_uuid"]
    update = act(client, vm_uuid, "update", json={"alias": "no spaces"})
    assert assert_error(update, 409, "ValidationFailed")["message"] == \
        "Invalid VM update parameters"


def test_every_refusal_of_a_nic_actions_body_carries_its_top_level_message(client) -> None:
    # add_nics' networks are VMAPI's validateNetworks' ("Invalid network parameters"),
    # remove_nics' macs its validateMacs' ("Invalid VM update parameters"), whichever check
    # refuses them: an address taken, a full network or an address outside the subnet said
    # "Invalid Parameters", and so did a MAC the VM has no NIC with
    network = make_network(client, start="10.2.0.2", end="10.2.0.2")
    vm_uuid = create_running_vm(client, networks=[network["uuid"]])
    mac = get_vm(client, vm_uuid)["nics"][0]["mac"]
    for networks, code, said in (
            ([{"uuid": network["uuid"], "ip": "10.2.0.2"}], "Duplicate", "already in use"),
            ([network["uuid"]], "Invalid", "no free address"),
            ([{"uuid": network["uuid"], "ip": "10.9.9.9"}], "Invalid", "not a host address"),
            (["nowhere"], "Invalid", "not found")):
        body = assert_error(act(client, vm_uuid, "add_nics", json={"networks": networks}),
                            409, "ValidationFailed")
        assert body["message"] == "Invalid network parameters", networks
        [error] = body["errors"]
        assert (error["field"], error["code"]) == ("networks", code), body
        assert said in error["message"], body
    for macs, said in ((["zz:zz"], "not a MAC address: zz:zz ("),
                       (["02:00:00:00:00:09"], "the VM has no NIC 02:00:00:00:00:09"),
                       (f"02:00:00:00:00:09,02:00:00:00:00:09,{mac}",
                        "the VM has no NIC 02:00:00:00:00:09"),
                       (["zz:zz", "zz:zz"], "not a MAC address: zz:zz (")):
        body = assert_error(act(client, vm_uuid, "remove_nics", json={"macs": macs}),
                            409, "ValidationFailed")
        assert body["message"] == "Invalid VM update parameters", macs
        [error] = body["errors"]
        assert error["field"] == "macs" and error["message"].startswith(said), body
        assert error["message"].count("zz:zz") + error["message"].count(":09") <= 1, body
    assert in_use(client, network) == 1
    assert [n["mac"] for n in get_vm(client, vm_uuid)["nics"]] == [mac]


@pytest.mark.parametrize("action", ["add_nics", "remove_nics"])
def test_a_nic_job_canceled_before_it_ran_leaves_the_nics_and_addresses_the_node_has(
        paused, action) -> None:
    # An add_nics records its NICs and claims when asked for; canceled by a quarantine
    # before it ran, it gives them back in the quarantine's save. A remove_nics records
    # nothing until the node applied it, so canceled it leaves the NICs as they were.
    client = paused.http
    network = make_network(client)
    created = create_vm(client, networks=[network["uuid"]])
    paused.run_jobs()
    vm_uuid = created["vm_uuid"]
    before = get_vm(client, vm_uuid)["nics"]
    node_before = sim_row(paused.services, vm_uuid)["config"]
    body = ({"networks": [network["uuid"]]} if action == "add_nics"
            else {"macs": [before[0]["mac"]]})
    asked = act(client, vm_uuid, action, json=body)
    assert asked.status_code == 202, asked.text
    assert act(client, vm_uuid, "quarantine", json={"reason": "look"}).status_code == 200
    assert act(client, vm_uuid, "release").status_code == 200
    paused.run_jobs()
    assert wait_job(client, asked.json()["job_uuid"])["execution"] == "canceled"
    assert sim_row(paused.services, vm_uuid)["config"] == node_before  # the node: untouched
    assert get_vm(client, vm_uuid)["nics"] == before
    assert in_use(client, network) == 1
