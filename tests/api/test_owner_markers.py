"""A ListVms marker naming a VM an owner's token may not see (another owner's, or its own once
quarantined: 404 to it everywhere else) answers exactly as a marker naming no VM: it told the
owner that the VM exists and where its ``create_timestamp`` falls among its own VMs (the
page after it), where an unknown uuid is 409. The console's fleet, which pages as ListVms,
the same."""

from __future__ import annotations

import json
import uuid

from tests.api.helpers import OTHER_OWNER, OWNER, vm_body
from tests.api.test_authorization import Authed, authed  # noqa: F401 - the fixture


def _created(api: Authed, owner_uuid: str) -> str:
    created = api.as_("operator", "POST", "/vms", json=vm_body(owner_uuid=owner_uuid)).json()
    job = api.as_("operator", "GET", f"/jobs/{created['job_uuid']}/wait",
                     params={"timeout": 10}).json()
    assert job["execution"] == "succeeded"
    return created["vm_uuid"]


def _refusal(api: Authed, path: str, marker_uuid: str) -> tuple[int, str]:
    """The owner's answer to ``path`` with a marker naming ``marker_uuid``, that uuid
    replaced by ``UUID``."""
    response = api.as_("owner", "GET", path, params={"marker": json.dumps({"uuid": marker_uuid})})
    return response.status_code, response.text.replace(marker_uuid, "UUID")


def test_a_marker_naming_a_vm_the_owner_may_not_see_is_a_marker_naming_no_vm(
        authed: Authed) -> None:  # noqa: F811 - the fixture
    theirs = _created(authed, OTHER_OWNER)
    quarantined = _created(authed, OWNER)
    response = authed.as_("operator", "POST", f"/vms/{quarantined}",
                          params={"action": "quarantine"}, json={"reason": "stuck"})
    assert response.status_code == 200, response.text
    mine = [_created(authed, OWNER) for _ in range(2)]
    # the owner's own VM names a position: the VMs created after it
    after_mine = authed.as_("owner", "GET", "/vms",
                            params={"marker": json.dumps({"uuid": mine[0]})})
    assert [vm["uuid"] for vm in after_mine.json()] == [mine[1]], after_mine.text
    no_vm = _refusal(authed, "/vms", str(uuid.uuid4()))
    assert no_vm[0] == 409
    assert json.loads(no_vm[1])["errors"][0]["message"] == (
        "Invalid marker: the marker names no VM (UUID)")
    no_vm_fleet = _refusal(authed, "/console/fragments/fleet", str(uuid.uuid4()))
    assert no_vm_fleet[0] == 409
    for hidden in (theirs, quarantined):
        assert _refusal(authed, "/vms", hidden) == no_vm
        assert _refusal(authed, "/console/fragments/fleet", hidden) == no_vm_fleet
    # an operator may see every VM: the other owner's VM names a position
    listed = authed.as_("operator", "GET", "/vms",
                        params={"marker": json.dumps({"uuid": theirs}),
                                "owner_uuid": OWNER})
    assert [vm["uuid"] for vm in listed.json()] == mine, listed.text
