"""``If-Match`` on the agents' reports (docs/api.md, "Compute agents"): a command accepts it,
and a mismatch is 412 and appends nothing. ``PUT /vms/{uuid}`` matches it against the VM's
version, in both forms; ``PUT /vms`` (a whole inventory, many VMs) against the server's, the
stream the inventory is recorded on. A tester sent ``If-Match: "1"`` with a report of a VM at
version 10: answered 200, the report applied."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from tests.api.helpers import assert_error, create_running_vm, get_vm, vm_body
from tests.api.test_authorization import (  # noqa: F401  (authed is a fixture)
    AGENT_SERVER,
    OTHER_SERVER,
    Authed,
    authed,
    bearer,
)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _report(services, vm: dict, form: str) -> dict:
    """A report that the VM (running) was found stopped, in ``form``."""
    if form == "vm-agent":
        return {"uuid": vm["uuid"], "state": "stopped", "server_uuid": vm["server_uuid"],
                "last_modified": _now()}
    sent = services.fleet.report(vm["server_uuid"])
    return {"state": "stopped", "server_uuid": vm["server_uuid"], "boot_id": sent["boot_id"],
            "generation": sent["generation"]}


FORMS = ["generation", "vm-agent"]


@pytest.mark.parametrize("form", FORMS)
def test_a_report_with_another_version_is_412_and_appends_nothing(client, services, form):
    vm = get_vm(client, create_running_vm(client))
    stale = vm["version"] - 1
    head = services.commands.head_position()
    refused = client.put(f"/vms/{vm['uuid']}", json=_report(services, vm, form),
                         headers={"If-Match": f'"{stale}"'})
    body = assert_error(refused, 412, "PreconditionFailed")
    assert body["current_version"] == vm["version"]
    assert refused.headers["etag"] == f'"{vm["version"]}"'
    assert services.commands.head_position() == head
    assert get_vm(client, vm["uuid"])["state"] == "running"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("matching", ["the version", "*", 'W/"the version"'])
def test_a_report_with_the_current_version_or_a_star_is_applied(client, services, form,
                                                                  matching):
    vm = get_vm(client, create_running_vm(client))
    header = matching.replace("the version", str(vm["version"]))
    applied = client.put(f"/vms/{vm['uuid']}", json=_report(services, vm, form),
                         headers={"If-Match": header})
    assert applied.status_code == 200, applied.text
    assert applied.json()["state"] == "stopped"
    assert applied.headers["etag"] == f'"{applied.json()["version"]}"'


@pytest.mark.parametrize("form", FORMS)
def test_a_malformed_if_match_on_a_report_is_refused_naming_it(client, services, form):
    vm = get_vm(client, create_running_vm(client))
    head = services.commands.head_position()
    refused = client.put(f"/vms/{vm['uuid']}", json=_report(services, vm, form),
                         headers={"If-Match": "seven"})
    assert refused.status_code == 409, refused.text
    assert [e["field"] for e in refused.json()["errors"]] == ["If-Match"]
    assert services.commands.head_position() == head


def test_vm_agents_report_of_a_vm_the_log_never_had_with_if_match_is_404_records_nothing(
        client, services):
    """Without ``If-Match`` such a report records the VM as found; with one, it names a
    version of a VM the log has: like every command's, a VM that does not exist is 404
    first, and nothing is recorded."""
    vm_uuid = str(uuid.uuid4())
    head = services.commands.head_position()
    refused = client.put(f"/vms/{vm_uuid}", json={"uuid": vm_uuid, "state": "running"},
                         headers={"If-Match": '"1"'})
    assert_error(refused, 404, "ResourceNotFound")
    assert services.commands.head_position() == head
    assert_error(client.get(f"/vms/{vm_uuid}"), 404, "ResourceNotFound")


def test_an_agents_report_of_another_servers_vm_is_404_whatever_if_match_says(
        authed: Authed) -> None:
    """The 404 of a VM the agent may not name comes before ``If-Match``, whose 412 would
    tell that the VM exists and its version."""
    created = authed.as_("operator", "POST", "/vms",
                         json=vm_body(server_uuid=OTHER_SERVER)).json()
    job = authed.as_("operator", "GET", f"/jobs/{created['job_uuid']}/wait",
                     params={"timeout": 10}).json()
    assert job["execution"] == "succeeded", job
    theirs = created["vm_uuid"]
    before = authed.head()
    for report in ({"state": "stopped", "server_uuid": AGENT_SERVER, "boot_id": "b1",
                    "generation": 1},
                   {"uuid": theirs, "state": "stopped", "server_uuid": AGENT_SERVER}):
        with authed.http.stream("PUT", f"/vms/{theirs}", json=report,
                                headers={**bearer("agent"), "If-Match": '"1"'}) as refused:
            refused.read()
        assert assert_error(refused, 404, "ResourceNotFound")["message"] == "VM not found"
        assert "current_version" not in refused.json() and "etag" not in refused.headers
    assert authed.head() == before


def test_an_inventory_matches_if_match_against_the_servers_version(client, services):
    """One header cannot name the version of each VM an inventory reports: ``PUT /vms``
    takes the server's (its ``ETag``), whose stream records the report."""
    vm = get_vm(client, create_running_vm(client))
    server_uuid = vm["server_uuid"]
    server_version = int(client.get(f"/servers/{server_uuid}").headers["etag"].strip('"'))

    def inventory() -> dict:
        sent = services.fleet.report(server_uuid)
        return {"boot_id": sent["boot_id"], "generation": sent["generation"],
                "vms": {vm["uuid"]: {"state": "stopped"}}}

    head = services.commands.head_position()
    refused = client.put("/vms", params={"server_uuid": server_uuid}, json=inventory(),
                         headers={"If-Match": f'"{server_version + 5}"'})
    body = assert_error(refused, 412, "PreconditionFailed")
    assert body["current_version"] == server_version
    assert services.commands.head_position() == head
    assert get_vm(client, vm["uuid"])["state"] == "running"
    applied = client.put("/vms", params={"server_uuid": server_uuid}, json=inventory(),
                         headers={"If-Match": f'"{server_version}"'})
    assert applied.status_code == 200, applied.text
    assert applied.json()["changed"] == {vm["uuid"]: "guest_shutdown"}
