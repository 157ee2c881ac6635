"""``If-Match: *`` matches any current version of a resource that exists, and none of one
that does not (RFC 9110, 13.1.1; api.md, "Contract: concurrency and idempotency"): every
command on a resource the log never had is 404 with it, as without the header, and records
nothing. Found by a tester: a vm-agent ``PUT /vms/{uuid}`` with ``If-Match: *`` recorded a VM
the log never had (200, history Discovered, CapacityClaimed), where ``If-Match: "1"`` was 404:
the ``*`` was read as no header at all, and without one such a report records the VM as
found."""

from __future__ import annotations

import uuid

from tests.api.helpers import OWNER, assert_error, create_running_vm, get_vm

STAR = {"If-Match": "*"}


def test_a_vm_agent_report_with_a_star_of_a_vm_the_log_never_had_is_404(client, services):
    vm_uuid = str(uuid.uuid4())
    head = services.commands.head_position()
    for server_uuid in (None, next(iter(services.fleet.servers())).uuid):
        report = {"uuid": vm_uuid, "state": "running", "owner_uuid": OWNER}
        if server_uuid is not None:  # on a server the log has: it would claim its capacity
            report["server_uuid"] = server_uuid
        refused = client.put(f"/vms/{vm_uuid}", json=report, headers=STAR)
        assert_error(refused, 404, "ResourceNotFound")
    assert services.commands.head_position() == head
    assert_error(client.get(f"/vms/{vm_uuid}"), 404, "ResourceNotFound")
    # without the header the same report records the VM as found, as before
    found = client.put(f"/vms/{vm_uuid}", json={"uuid": vm_uuid, "state": "running"})
    assert found.status_code == 200, found.text
    # and once it exists, a star matches it
    again = client.put(f"/vms/{vm_uuid}", json={"uuid": vm_uuid, "state": "stopped"},
                       headers=STAR)
    assert again.status_code == 200, again.text


def test_every_command_on_a_resource_the_log_never_had_is_404_with_a_star(client, services):
    """Each route that names an existing resource: the VM commands, an agent's reports, the
    server and volume actions. (The creates take ``*`` as any other well-formed value: what
    they make has no version, and the collection they post to exists.)"""
    nobody = str(uuid.uuid4())
    server_uuid = next(iter(services.fleet.servers())).uuid
    report = services.fleet.report(server_uuid)
    sends = {
        "vm-agent PutVm": ("PUT", f"/vms/{nobody}", {"uuid": nobody, "state": "stopped"}),
        "generational PutVm": ("PUT", f"/vms/{nobody}", {
            "state": "stopped", "server_uuid": server_uuid, "boot_id": report["boot_id"],
            "generation": report["generation"]}),
        "PutVms": ("PUT", f"/vms?server_uuid={nobody}", {"boot_id": "b", "generation": 1,
                                                         "vms": {}}),
        "start": ("POST", f"/vms/{nobody}?action=start", None),
        "update": ("POST", f"/vms/{nobody}?action=update", {"alias": "x"}),
        "remove_nics": ("POST", f"/vms/{nobody}?action=remove_nics",
                        {"macs": ["02:00:00:00:00:00"]}),
        "quarantine": ("POST", f"/vms/{nobody}?action=quarantine", {"reason": "r"}),
        "DeleteVm": ("DELETE", f"/vms/{nobody}", None),
        "server reboot": ("POST", f"/servers/{nobody}?action=reboot", {}),
        "server remove": ("POST", f"/servers/{nobody}?action=remove", {}),
        "volume detach": ("POST", f"/volumes/{nobody}?action=detach_network",
                          {"network_uuid": str(uuid.uuid4())}),
    }
    head = services.commands.head_position()
    for name, (method, path, body) in sends.items():
        for version in ("~1", "~2"):
            refused = client.request(method, path, json=body,
                                     headers={**STAR, "Accept-Version": version})
            assert refused.status_code == 404, (name, version, refused.text)
            assert refused.json()["code"] == "ResourceNotFound", (name, refused.text)
    assert services.commands.head_position() == head


def test_a_star_matches_a_vm_that_exists_on_every_vm_command(client):
    vm_uuid = create_running_vm(client)
    version = get_vm(client, vm_uuid)["version"]
    updated = client.post(f"/vms/{vm_uuid}", params={"action": "update"},
                          json={"alias": "starred"}, headers=STAR)
    assert updated.status_code == 202, updated.text
    assert int(updated.headers["etag"].strip('"')) > version
    deleted = client.delete(f"/vms/{vm_uuid}", headers=STAR)
    assert deleted.status_code == 202, deleted.text
