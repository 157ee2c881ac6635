"""If-Match on every command (api.md, "Concurrency and idempotency"): a mismatch is 412 with
``current_version``, appends nothing and leaves every read model unchanged; a malformed value
is bad input (ValidationFailed naming ``If-Match``) on every route that takes the header, and
changes nothing either (issue #14: the quarantine actions used to ignore it)."""

from __future__ import annotations

import pytest

OWNER = "930896af-bf8c-48d4-885c-6573a94b1853"

COMMANDS = [
    ("post", "?action=start", None),
    ("post", "?action=stop", None),
    ("post", "?action=kill", None),
    ("post", "?action=reboot", None),
    ("post", "?action=update", {"alias": "renamed"}),
    ("delete", "", None),
]
# The operator's quarantine actions answer 200 with the VM, not 202 with a job.
QUARANTINE_COMMANDS = [
    ("post", "?action=quarantine", {"reason": "looked odd"}),
    ("post", "?action=release", None),
]


@pytest.fixture
def running_vm(client) -> str:
    created = client.post("/vms", json={"owner_uuid": OWNER, "brand": "bhyve", "ram": 256})
    job = client.get(f"/jobs/{created.json()['job_uuid']}/wait?timeout=10").json()
    assert job["execution"] == "succeeded"
    return created.json()["vm_uuid"]


def _send(client, method: str, path: str, body, headers):
    if method == "delete":
        return client.delete(path, headers=headers)
    return client.post(path, json=body, headers=headers)


@pytest.mark.parametrize(("method", "query", "body"), COMMANDS + QUARANTINE_COMMANDS)
def test_a_stale_if_match_is_412_and_changes_nothing(client, services, running_vm,
                                                     method, query, body):
    vm = client.get(f"/vms/{running_vm}")
    version = int(vm.headers["etag"].strip('"'))
    head = services.commands.head_position()
    assert services.projections.wait_for(head, services.projections.read_models, timeout=10)
    views = (services.projections.positions(), client.get(f"/vms/{running_vm}").json(),
             client.get(f"/vms/{running_vm}/jobs").json())
    refused = _send(client, method, f"/vms/{running_vm}{query}", body,
                    {"If-Match": f'"{version - 1}"', "Accept-Version": "~2"})
    assert refused.status_code == 412
    assert refused.json()["code"] == "PreconditionFailed"
    assert refused.json()["current_version"] == version
    assert services.commands.head_position() == head
    assert (services.projections.positions(), client.get(f"/vms/{running_vm}").json(),
            client.get(f"/vms/{running_vm}/jobs").json()) == views


@pytest.mark.parametrize(("method", "query", "body"), COMMANDS)
def test_a_current_if_match_is_accepted(client, running_vm, method, query, body):
    etag = client.get(f"/vms/{running_vm}").headers["etag"]
    accepted = _send(client, method, f"/vms/{running_vm}{query}", body,
                     {"If-Match": etag, "Accept-Version": "~2"})
    assert accepted.status_code == 202, accepted.json()
    assert int(accepted.headers["etag"].strip('"')) > int(etag.strip('"'))


@pytest.mark.parametrize(("method", "query", "body"), COMMANDS + QUARANTINE_COMMANDS)
@pytest.mark.parametrize(("version", "status"), [("~1", 409), ("~2", 422)])
def test_a_malformed_if_match_is_refused_naming_it_and_changes_nothing(
        client, services, running_vm, method, query, body, version, status):
    head = services.commands.head_position()
    refused = _send(client, method, f"/vms/{running_vm}{query}", body,
                    {"If-Match": "yesterday", "Accept-Version": version})
    assert refused.status_code == status, refused.json()
    assert refused.json()["code"] == "ValidationFailed"
    assert [e["field"] for e in refused.json()["errors"]] == ["If-Match"]
    assert services.commands.head_position() == head


def test_a_current_if_match_is_accepted_by_quarantine_and_release(client, running_vm):
    etag = client.get(f"/vms/{running_vm}").headers["etag"]
    taken = client.post(f"/vms/{running_vm}?action=quarantine", json={"reason": "looked odd"},
                        headers={"If-Match": etag})
    assert taken.status_code == 200, taken.json()
    assert taken.json()["state"] == "quarantined"
    assert int(taken.headers["etag"].strip('"')) > int(etag.strip('"'))
    given_back = client.post(f"/vms/{running_vm}?action=release",
                             headers={"If-Match": taken.headers["etag"]})
    assert given_back.status_code == 200, given_back.json()
    assert given_back.json()["state"] == "running"


# The NIC actions (add_nics, remove_nics) read If-Match the same way.
NIC_COMMANDS = [
    ("?action=add_nics", lambda network: {"networks": [network]}),
    ("?action=remove_nics", lambda _network: {"macs": ["02:00:00:00:00:00"]}),
]


@pytest.fixture
def network(client) -> str:
    made = client.post("/networks", json={"name": "if-match", "subnet": "10.9.0.0/28",
                                          "provision_start_ip": "10.9.0.2",
                                          "provision_end_ip": "10.9.0.5"})
    assert made.status_code == 201, made.text
    return made.json()["uuid"]


@pytest.mark.parametrize(("query", "body"), NIC_COMMANDS)
def test_nic_actions_refuse_a_stale_or_malformed_if_match_and_change_nothing(
        client, services, running_vm, network, query, body):
    version = int(client.get(f"/vms/{running_vm}").headers["etag"].strip('"'))
    head = services.commands.head_position()
    path = f"/vms/{running_vm}{query}"
    stale = client.post(path, json=body(network),
                        headers={"If-Match": f'"{version - 1}"', "Accept-Version": "~2"})
    assert stale.status_code == 412, stale.json()
    assert stale.json()["current_version"] == version
    malformed = client.post(path, json=body(network),
                            headers={"If-Match": "yesterday", "Accept-Version": "~2"})
    assert malformed.status_code == 422, malformed.json()
    assert [e["field"] for e in malformed.json()["errors"]] == ["If-Match"]
    assert services.commands.head_position() == head


def test_add_nics_accepts_the_current_if_match(client, running_vm, network):
    etag = client.get(f"/vms/{running_vm}").headers["etag"]
    accepted = client.post(f"/vms/{running_vm}?action=add_nics", json={"networks": [network]},
                           headers={"If-Match": etag, "Accept-Version": "~2"})
    assert accepted.status_code == 202, accepted.json()
    assert int(accepted.headers["etag"].strip('"')) > int(etag.strip('"'))


# The creates: what they make has no version yet, but the header is checked as every
# command's is (found by a tester: CreateVm took "If-Match: garbage" without a word).
CREATES = {
    "CreateVm": ("/vms", {"owner_uuid": OWNER, "brand": "bhyve", "ram": 256}),
    "CreateVolume": ("/volumes", {"name": "vol"}),
    "CreateNetwork": ("/networks", {"name": "n", "subnet": "10.8.0.0/28",
                                    "provision_start_ip": "10.8.0.2",
                                    "provision_end_ip": "10.8.0.5"}),
    "CreateServer": ("/servers", {"hostname": "cn-if", "ram_mib": 1024, "cpus": 2}),
}


@pytest.mark.parametrize(("path", "body"), CREATES.values(), ids=CREATES.keys())
@pytest.mark.parametrize(("version", "status"), [("~1", 409), ("~2", 422)])
def test_a_create_refuses_a_malformed_if_match_and_takes_a_well_formed_one(
        client, services, path, body, version, status):
    head = services.commands.head_position()
    refused = client.post(path, json=body,
                          headers={"If-Match": "garbage", "Accept-Version": version})
    assert refused.status_code == status, refused.json()
    assert [e["field"] for e in refused.json()["errors"]] == ["If-Match"]
    assert services.commands.head_position() == head
    taken = client.post(path, json=body, headers={"If-Match": "*", "Accept-Version": version})
    assert taken.status_code in (201, 202), taken.json()
