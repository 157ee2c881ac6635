"""Actions a role may not take on a route it may otherwise use (``auth.ACTION_ROLES``): refused
wherever the action is named, the query or the body, and scoped by ``owner_uuid`` as every
action is."""

from __future__ import annotations

import pytest

from tests.api.helpers import OTHER_OWNER, OWNER, assert_error, vm_body
from tests.api.test_authorization import (  # noqa: F401  (authed is a fixture)
    Authed,
    _two_owners_vms,
    authed,
)


def test_quarantine_and_release_are_refused_to_owners_even_of_their_own_vm(
        authed: Authed) -> None:
    created = authed.as_("owner", "POST", "/vms", json=vm_body()).json()
    for action in ("quarantine", "release"):
        response = authed.as_("owner", "POST", f"/vms/{created['vm_uuid']}",
                              params={"action": action}, json={"reason": "mine"})
        assert_error(response, 403, "Forbidden")


@pytest.mark.parametrize("where", ["body", "both"])
def test_an_action_narrowed_to_operators_is_refused_to_owners_when_named_in_the_body(
        authed: Authed, where: str) -> None:
    """The action may be in the query or the body (VMAPI maps both); the roles it narrows
    to are those of the action the route takes, wherever it is named: an owner quarantined
    and released any owner's VM with ``{"action": "quarantine"}`` (tester)."""
    _mine, theirs = _two_owners_vms(authed)
    for vm in (_mine["vm_uuid"], theirs["vm_uuid"]):
        before = authed.head()
        for action, body in (("quarantine", {"reason": "x"}), ("release", {})):
            params = {"action": action} if where == "both" else {}
            response = authed.as_("owner", "POST", f"/vms/{vm}", params=params,
                                  json={"action": action, **body})
            error = assert_error(response, 403, "Forbidden")
            assert f"?action={action}" in error["message"]
        assert authed.head() == before
    # an operator still may, with the action in the body
    response = authed.as_("operator", "POST", f"/vms/{theirs['vm_uuid']}",
                          json={"action": "quarantine", "reason": "x"})
    assert response.status_code == 200, response.text


def test_quarantine_and_release_scoped_by_owner_uuid_find_no_other_owners_vm(
        authed: Authed) -> None:
    """``owner_uuid`` in an action's query makes another owner's VM not found (VMAPI
    clients' scoping): quarantine and release validated it and then acted on any VM."""
    _mine, theirs = _two_owners_vms(authed)
    vm = theirs["vm_uuid"]
    before = authed.head()
    response = authed.as_("operator", "POST", f"/vms/{vm}",
                          params={"action": "quarantine", "owner_uuid": OWNER},
                          json={"reason": "x"})
    assert_error(response, 404, "ResourceNotFound")
    assert authed.head() == before
    quarantined = authed.as_("operator", "POST", f"/vms/{vm}",
                             params={"action": "quarantine", "owner_uuid": OTHER_OWNER},
                             json={"reason": "x"})
    assert quarantined.status_code == 200, quarantined.text
    after_quarantine = authed.head()
    response = authed.as_("operator", "POST", f"/vms/{vm}",
                          params={"action": "release", "owner_uuid": OWNER})
    assert_error(response, 404, "ResourceNotFound")
    assert authed.head() == after_quarantine
    released = authed.as_("operator", "POST", f"/vms/{vm}", params={"action": "release"})
    assert released.status_code == 200, released.text
    assert released.json()["owner_uuid"] == OTHER_OWNER
