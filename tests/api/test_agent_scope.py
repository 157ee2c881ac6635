"""What an agent token can learn (api.md, "Roles": an agent reports for its server and reads
nothing). Every route the agent role may call is listed here with a test that it tells the
agent nothing about VMs its server does not hold: a VM on another server is refused exactly as
a VM that does not exist, so the answer neither shows the VM nor reveals that it exists."""

from __future__ import annotations

import uuid

from service.api.auth import AGENT, ROUTE_ROLES
from tests.api.helpers import assert_error, vm_body
from tests.api.test_authorization import (  # noqa: F401  (authed is a fixture)
    AGENT_SERVER, OTHER_SERVER, Authed, authed,
)

# Every route the agent role may call, each audited by a test below.
AUDITED = {("GET", "/ping"), ("PUT", "/vms/{vm_uuid}"), ("PUT", "/vms"),
           ("GET", "/console/fragments/session")}


def _running_vm_on(authed: Authed, server_uuid: str) -> str:
    created = authed.as_("operator", "POST", "/vms",
                         json=vm_body(server_uuid=server_uuid, alias="secret")).json()
    job = authed.as_("operator", "GET", f"/jobs/{created['job_uuid']}/wait",
                     params={"timeout": 10}).json()
    assert job["execution"] == "succeeded", job
    return created["vm_uuid"]


def test_every_route_the_agent_role_may_call_is_audited_here() -> None:
    assert {route for route, roles in ROUTE_ROLES.items() if AGENT in roles} == AUDITED


def test_put_vm_of_a_vm_on_another_server_is_refused_as_a_vm_that_does_not_exist(
        authed: Authed) -> None:
    theirs = _running_vm_on(authed, OTHER_SERVER)
    unknown = str(uuid.uuid4())
    report = {"state": "stopped", "server_uuid": AGENT_SERVER, "boot_id": "b1",
              "generation": 1}
    before = authed.head()
    refused = authed.as_("agent", "PUT", f"/vms/{theirs}", json=report)
    absent = authed.as_("agent", "PUT", f"/vms/{unknown}", json=report)
    assert_error(refused, 404, "ResourceNotFound")
    assert refused.json() == {**absent.json(),
                              "message": absent.json()["message"].replace(unknown, theirs)}
    assert "secret" not in refused.text and OTHER_SERVER not in refused.text
    assert authed.head() == before
    vm = authed.as_("operator", "GET", f"/vms/{theirs}").json()
    assert vm["state"] == "running"


def test_put_vm_in_vm_agents_form_of_a_vm_on_another_server_is_refused_and_changes_nothing(
        authed: Authed) -> None:
    # vm-agent's form (no generation) records a VM the log never had as found, so the refusal
    # cannot look like that; it is the 404 of an unknown VM, and shows nothing of the VM.
    theirs = _running_vm_on(authed, OTHER_SERVER)
    before = authed.head()
    refused = authed.as_("agent", "PUT", f"/vms/{theirs}", json={
        "uuid": theirs, "state": "stopped", "server_uuid": AGENT_SERVER})
    assert assert_error(refused, 404, "ResourceNotFound")["message"] == "VM not found"
    assert "secret" not in refused.text and OTHER_SERVER not in refused.text
    assert authed.head() == before


def test_put_vm_of_a_vm_on_the_agents_own_server_answers_the_vm(authed: Authed) -> None:
    mine = _running_vm_on(authed, AGENT_SERVER)
    response = authed.as_("agent", "PUT", f"/vms/{mine}", json={
        "state": "running", "server_uuid": AGENT_SERVER, "boot_id": "b1", "generation": 1})
    assert response.status_code == 200, response.text
    assert response.json()["uuid"] == mine


def test_put_vms_naming_a_vm_on_another_server_leaves_it_and_answers_nothing_of_it(
        authed: Authed) -> None:
    theirs = _running_vm_on(authed, OTHER_SERVER)
    before = authed.head()
    response = authed.as_("agent", "PUT", "/vms", params={"server_uuid": AGENT_SERVER}, json={
        "boot_id": "b1", "generation": 1, "vms": {theirs: {"state": "failed"}}})
    assert response.status_code == 200, response.text
    assert theirs not in response.text
    assert authed.as_("operator", "GET", f"/vms/{theirs}").json()["state"] == "running"
    # what the report appended (the server's boot id) concerns the agent's own server only
    history = authed.as_("operator", "GET", f"/vms/{theirs}/history").json()
    assert all(event["position"] <= before for event in history)


def test_ping_tells_an_agent_nothing_about_vms(authed: Authed) -> None:
    theirs = _running_vm_on(authed, OTHER_SERVER)
    response = authed.as_("agent", "GET", "/ping")
    assert response.status_code == 200, response.text
    assert set(response.json()) == {"status", "backend", "head_position", "projection_lag",
                                    "projection_past_head", "healthy", "pid", "pingErrors"}
    assert theirs not in response.text and "secret" not in response.text


def test_the_console_session_fragment_tells_an_agent_only_who_it_is(authed: Authed) -> None:
    theirs = _running_vm_on(authed, OTHER_SERVER)
    response = authed.as_("agent", "GET", "/console/fragments/session")
    assert response.status_code == 200, response.text
    assert "agent" in response.text
    assert theirs not in response.text and "secret" not in response.text
    assert OTHER_SERVER not in response.text


def test_every_other_route_refuses_the_agent_before_reading_anything(authed: Authed) -> None:
    theirs = _running_vm_on(authed, OTHER_SERVER)
    for method, url in [("GET", f"/vms/{theirs}"), ("GET", f"/vms/{theirs}/history"),
                        ("GET", f"/vms/{theirs}/jobs"), ("GET", "/vms"), ("GET", "/jobs"),
                        ("GET", f"/servers/{OTHER_SERVER}"), ("GET", "/stats/states")]:
        response = authed.as_("agent", method, url)
        assert_error(response, 403, "Forbidden")
        assert theirs not in response.text, (method, url)
