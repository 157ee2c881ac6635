"""An owner learns nothing of a VM it may not see from ``If-Match`` (api.md, "Contract: roles":
another owner's VM, and its own once quarantined, is 404). Found by a security tester: the
version check ran before the visibility check, so ``If-Match: "1"`` on another owner's VM
answered 412 with the VM's current version where any other request answered 404. Every
command route an owner may address a VM by is covered, whatever ``If-Match`` says."""

from __future__ import annotations

from typing import Any

import pytest

from service.api.auth import ROUTE_ROLES
from service.api.tokens import OWNER as OWNER_ROLE
from tests.api import test_authorization
from tests.api.helpers import assert_error
from tests.api.test_authorization import Authed, _two_owners_vms, bearer

authed = test_authorization.authed  # the fixture: the API with a tokens file

# Every If-Match an owner may send: a wrong version, the right one (filled in), any, weak.
IF_MATCHES = ('"1"', "RIGHT", "*", 'W/"1"', "999")

# (method, query, body) of every command an owner may send about a VM.
COMMANDS: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = [
    ("POST", {"action": "stop"}, None),
    ("POST", {"action": "start"}, None),
    ("POST", {"action": "reboot"}, None),
    ("POST", {"action": "kill"}, None),
    ("POST", {"action": "stop", "sync": "true"}, None),
    ("POST", {"action": "update"}, {"alias": "renamed"}),
    ("POST", {"action": "update"}, {"tags": {"a": "b"}, "customer_metadata": {"k": "v"}}),
    ("POST", {"action": "add_nics"},
     {"networks": [{"uuid": "00000000-0000-4000-8000-000000000001"}]}),
    ("POST", {"action": "remove_nics"}, {"macs": ["90:b8:d0:00:00:01"]}),
    ("DELETE", {}, None),
    ("DELETE", {"sync": "true"}, None),
]


def _send(authed: Authed, vm: str, method: str, query: dict[str, Any],
          body: dict[str, Any] | None, headers: dict[str, str]) -> Any:
    response = authed.http.request(method, f"/vms/{vm}", params=query, json=body,
                                   headers={**bearer("owner"), **headers})
    return response


def _refused_as_absent(authed: Authed, vm: str) -> None:
    version = authed.services.commands.load(vm).version
    before = authed.head()
    wrong = []
    for method, query, body in COMMANDS:
        for accept in ("~1", "~2"):
            for if_match in IF_MATCHES:
                sent = f'"{version}"' if if_match == "RIGHT" else if_match
                response = _send(authed, vm, method, query, body,
                                 {"If-Match": sent, "Accept-Version": accept})
                if response.status_code != 404 or response.json()["code"] != "ResourceNotFound" \
                        or str(version) in response.headers.get("etag", "") \
                        or "version" in response.text:
                    wrong.append((method, query, accept, sent, response.status_code,
                                  response.headers.get("etag"), response.text))
    assert [w[:6] for w in wrong] == []
    assert authed.head() == before


def test_an_owners_if_match_on_another_owners_vm_is_404_whatever_the_version(
        authed: Authed) -> None:
    _mine, theirs = _two_owners_vms(authed)
    _refused_as_absent(authed, theirs["vm_uuid"])
    # its own owner gets the 412, with the version, as before
    response = authed.http.post(f"/vms/{theirs['vm_uuid']}", params={"action": "stop"},
                                headers={**bearer("owner_b"), "If-Match": '"1"'})
    body = assert_error(response, 412, "PreconditionFailed")
    assert body["current_version"] == authed.services.commands.load(theirs["vm_uuid"]).version


def test_an_owners_if_match_on_its_own_quarantined_vm_is_404_whatever_the_version(
        authed: Authed) -> None:
    mine, _theirs = _two_owners_vms(authed)
    vm = mine["vm_uuid"]
    response = authed.as_("operator", "POST", f"/vms/{vm}", params={"action": "quarantine"},
                          json={"reason": "stuck"})
    assert response.status_code == 200, response.text
    _refused_as_absent(authed, vm)


def test_every_route_an_owner_may_change_is_covered_here() -> None:
    """A new command route an owner may call must be added to ``COMMANDS`` above (and its
    aggregate's visibility checked before ``If-Match``)."""
    writable = sorted(route for route, roles in ROUTE_ROLES.items()
                      if OWNER_ROLE in roles and route[0] not in ("GET", "HEAD"))
    assert writable == [("DELETE", "/vms/{vm_uuid}"), ("POST", "/vms"),
                        ("POST", "/vms/{vm_uuid}")]


@pytest.mark.parametrize("if_match", ['"1"', "*"])
def test_an_operator_still_gets_the_version_check(authed: Authed, if_match: str) -> None:
    _mine, theirs = _two_owners_vms(authed)
    response = authed.http.post(f"/vms/{theirs['vm_uuid']}", params={"action": "stop"},
                                headers={**bearer("operator"), "If-Match": if_match})
    assert response.status_code == (412 if if_match == '"1"' else 202), response.text
