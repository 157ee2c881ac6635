"""Bearer tokens and roles (api.md, "Roles"): every route × every role is allowed or refused
as ``service.api.auth.ROUTE_ROLES`` declares, and an owner never sees another owner's VM."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.auth import ROUTE_ROLES
from service.api.tokens import ROLES, TokenFileError, Tokens, new_token
from service.container import Services
from service.jobs.compute.simulated import simulated_server_uuid
from tests.api.conformance import conforming
from tests.api.helpers import OTHER_OWNER, OWNER, assert_error, vm_body, wait_job

AGENT_SERVER = simulated_server_uuid(0)
OTHER_SERVER = simulated_server_uuid(1)
# One token per role; "owner" is bound to OWNER, "owner_b" to OTHER_OWNER.
TOKENS = {name: f"token-of-{name}" for name in (*ROLES, "owner_b")}


def bearer(name: str) -> dict[str, str]:
    """The Authorization header of the token named ``name``."""
    return {"Authorization": f"Bearer {TOKENS[name]}"}


def _entry(name: str, role: str, **bound: str) -> str:
    digest = hashlib.sha256(TOKENS[name].encode()).hexdigest()
    lines = [f'name = "{name}"', f'role = "{role}"', f'sha256 = "{digest}"']
    lines += [f'{key} = "{value}"' for key, value in bound.items()]
    return "[[tokens]]\n" + "\n".join(lines) + "\n"


def write_tokens_file(path: Path) -> Path:
    """A TOML tokens file with one token per role (and a second owner)."""
    entries = [_entry(role, role) for role in ("operator", "auditor", "analyst")]
    entries.append(_entry("owner", "owner", owner_uuid=OWNER))
    entries.append(_entry("owner_b", "owner", owner_uuid=OTHER_OWNER))
    entries.append(_entry("agent", "agent", server_uuid=AGENT_SERVER))
    path.write_text("\n".join(entries))
    return path


@dataclass
class Authed:
    http: TestClient
    services: Services
    app: FastAPI

    def as_(self, name: str, method: str, url: str, **kwargs) -> object:
        """The response to ``name``'s request; an event stream (GET /changes) is not read
        past its headers, since it never ends by itself."""
        with self.http.stream(method, url, headers=bearer(name), **kwargs) as response:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                response.read()
        return response

    def head(self) -> int:
        return self.services.commands.head_position()


@pytest.fixture
def authed(services: Services, tmp_path: Path) -> Iterator[Authed]:
    """The API over ``services`` with a tokens file configured."""
    settings = services.settings.model_copy(
        update={"tokens_file": write_tokens_file(tmp_path / "tokens.toml")})
    app = create_app(settings, services=services, background=True)
    with conforming(TestClient(app)) as http:
        yield Authed(http, services, app)


def _routes(app: FastAPI) -> list[tuple[str, str]]:
    """Every (method, path template) the app has a route for, as FastAPI's own schema lists
    them (this FastAPI nests included routers, so the schema is the list of every route).
    Not the app's served schema: it also declares each GET's HEAD, which is that GET run
    without its body and allowed as it is (service/api/head.py); only a HEAD route of its
    own (``HEAD /vms``) is one more route."""
    paths = get_openapi(title=app.title, version=app.version, routes=app.routes)["paths"]
    return sorted((method.upper(), path) for path, operations in paths.items()
                  for method in operations)


def test_every_route_declares_its_roles_and_every_declaration_names_a_route(
        authed: Authed) -> None:
    routes = _routes(authed.app)
    assert ("GET", "/vms") in routes
    assert [r for r in routes if r not in ROUTE_ROLES] == []
    assert [r for r in ROUTE_ROLES if r not in routes] == []
    assert all(set(roles) <= set(ROLES) and "operator" in roles
               for roles in ROUTE_ROLES.values())


def _url(path: str) -> str:
    return re.sub(r"\{[^}]+\}", str(uuid.uuid4()), path)


def test_every_route_allows_exactly_the_roles_it_declares_and_refuses_others_with_403(
        authed: Authed) -> None:
    refused_wrongly, allowed_wrongly = [], []
    for method, path in _routes(authed.app):
        for role in ROLES:
            before = authed.head()
            response = authed.as_(role, method, _url(path))
            if role in ROUTE_ROLES[(method, path)]:
                if response.status_code in (401, 403):
                    refused_wrongly.append((method, path, role, response.status_code))
            else:
                if response.status_code != 403 or (
                        method != "HEAD" and response.json()["code"] != "Forbidden"):
                    allowed_wrongly.append((method, path, role, response.status_code))
                assert authed.head() == before, (method, path, role)
    assert refused_wrongly == []
    assert allowed_wrongly == []


def test_every_route_answers_401_without_a_token_or_with_an_unknown_one(authed: Authed) -> None:
    for method, path in _routes(authed.app):
        for headers in ({}, {"Authorization": "Bearer not-a-token"},
                        {"Authorization": f"Basic {TOKENS['operator']}"}):
            response = authed.http.request(method, _url(path), headers=headers)
            assert response.status_code == 401, (method, path, headers)
            assert response.headers["www-authenticate"].startswith("Bearer")
            if method != "HEAD":
                assert response.json()["code"] == "Unauthorized"


def test_the_token_name_is_the_cause_actor_of_the_events_it_appends(authed: Authed) -> None:
    created = authed.as_("owner", "POST", "/vms", json=vm_body()).json()
    history = authed.as_("operator", "GET", f"/vms/{created['vm_uuid']}/history").json()
    assert history[0]["cause"]["actor"] == "owner"


def test_an_owner_token_cannot_create_a_vm_for_another_owner(authed: Authed) -> None:
    before = authed.head()
    response = authed.as_("owner", "POST", "/vms", json=vm_body(owner_uuid=OTHER_OWNER))
    assert_error(response, 403, "Forbidden")
    assert authed.head() == before


def test_an_owner_token_creates_for_its_own_owner_only_in_the_query_too(authed: Authed) -> None:
    # CreateVm takes owner_uuid in the query as in the body (test_create_vm_owner_in_query)
    before = authed.head()
    body = {"brand": "joyent", "ram": 256}
    refused = authed.as_("owner", "POST", f"/vms?owner_uuid={OTHER_OWNER}", json=body)
    assert_error(refused, 403, "Forbidden")
    assert authed.head() == before
    own = authed.as_("owner", "POST", f"/vms?owner_uuid={OWNER}", json=body)
    assert own.status_code == 202, own.text


def test_an_agent_reports_only_for_its_own_server(authed: Authed) -> None:
    created = authed.as_("operator", "POST", "/vms",
                         json=vm_body(server_uuid=AGENT_SERVER)).json()
    authed.as_("operator", "GET", f"/jobs/{created['job_uuid']}/wait", params={"timeout": 10})
    vm = created["vm_uuid"]
    report = {"state": "running", "boot_id": "b1", "generation": 1}
    before = authed.head()
    assert_error(authed.as_("agent", "PUT", f"/vms/{vm}",
                            json={**report, "server_uuid": OTHER_SERVER}), 403, "Forbidden")
    assert_error(authed.as_("agent", "PUT", "/vms", params={"server_uuid": OTHER_SERVER},
                            json={"boot_id": "b1", "generation": 1, "vms": {}}),
                 403, "Forbidden")
    assert authed.head() == before
    response = authed.as_("agent", "PUT", f"/vms/{vm}",
                          json={**report, "server_uuid": AGENT_SERVER})
    assert response.status_code == 200, response.text


def _two_owners_vms(authed: Authed) -> tuple[dict, dict]:
    mine = authed.as_("operator", "POST", "/vms", json=vm_body()).json()
    theirs = authed.as_("operator", "POST", "/vms", json=vm_body(owner_uuid=OTHER_OWNER)).json()
    for created in (mine, theirs):
        job = authed.as_("operator", "GET", f"/jobs/{created['job_uuid']}/wait",
                         params={"timeout": 10}).json()
        assert job["execution"] == "succeeded"
    return mine, theirs


def test_an_owner_never_sees_another_owners_vm_in_any_response(authed: Authed) -> None:
    mine, theirs = _two_owners_vms(authed)
    vm, job = theirs["vm_uuid"], theirs["job_uuid"]
    for url, params in [
        (f"/vms/{vm}", {}), (f"/vms/{vm}", {"version": 1}), (f"/vms/{vm}", {"owner_uuid": OTHER_OWNER}),
        (f"/vms/{vm}/jobs", {}), (f"/vms/{vm}/history", {}), (f"/jobs/{job}", {}),
        (f"/jobs/{job}/wait", {"timeout": 0}),
    ]:
        assert_error(authed.as_("owner", "GET", url, params=params), 404, "ResourceNotFound")
    listed = authed.as_("owner", "GET", "/vms")
    assert [v["uuid"] for v in listed.json()] == [mine["vm_uuid"]]
    assert listed.headers["x-joyent-resource-count"] == "1"
    assert authed.as_("owner", "HEAD", "/vms").headers["x-joyent-resource-count"] == "1"
    assert authed.as_("owner", "GET", "/vms", params={"owner_uuid": OTHER_OWNER}).json() == []
    jobs = authed.as_("owner", "GET", "/jobs").json()
    assert {j["vm_uuid"] for j in jobs} == {mine["vm_uuid"]}
    assert authed.as_("owner", "GET", "/jobs", params={"vm_uuid": vm}).json() == []
    states = authed.as_("owner", "GET", "/stats/states").json()
    assert states["running"] == 1
    by_owner = authed.as_("owner", "GET", "/stats/states", params={"by": "owner"}).json()
    assert OTHER_OWNER not in json.dumps(by_owner)
    everything = authed.as_("operator", "GET", "/stats/states").json()
    assert everything["running"] == 2


def test_an_owners_actions_and_delete_on_another_owners_vm_are_404_and_append_nothing(
        authed: Authed) -> None:
    _mine, theirs = _two_owners_vms(authed)
    vm = theirs["vm_uuid"]
    before = authed.head()
    for action in ("stop", "start", "reboot", "update"):
        response = authed.as_("owner", "POST", f"/vms/{vm}", params={"action": action})
        assert_error(response, 404, "ResourceNotFound")
    assert_error(authed.as_("owner", "DELETE", f"/vms/{vm}"), 404, "ResourceNotFound")
    assert authed.head() == before
    response = authed.as_("owner_b", "POST", f"/vms/{vm}", params={"action": "stop"})
    assert response.status_code == 202, response.text


def test_a_create_naming_another_owners_vm_is_a_duplicate_saying_not_whose(
        authed: Authed) -> None:
    """The uuid cannot be given again, so its being taken is said; but not that a VM has it,
    or whose (everywhere else another owner's VM is 404 to an owner)."""
    _mine, theirs = _two_owners_vms(authed)
    before = authed.head()
    response = authed.as_("owner", "POST", "/vms", json=vm_body(uuid=theirs["vm_uuid"]))
    body = assert_error(response, 409, "ValidationFailed")
    assert body["errors"] == [{"field": "uuid", "code": "Duplicate", "message": "Already exists"}]
    assert body["message"] == "Invalid VM parameters", body  # as any bad field of CreateVm
    assert authed.head() == before


def test_a_quarantined_vm_is_404_to_its_previous_owner(authed: Authed) -> None:
    mine, _theirs = _two_owners_vms(authed)
    vm = mine["vm_uuid"]
    response = authed.as_("operator", "POST", f"/vms/{vm}", params={"action": "quarantine"},
                          json={"reason": "stuck"})
    assert response.status_code == 200, response.text
    for url in (f"/vms/{vm}", f"/vms/{vm}/history", f"/vms/{vm}/jobs",
                f"/jobs/{mine['job_uuid']}"):
        assert_error(authed.as_("owner", "GET", url), 404, "ResourceNotFound")
    assert authed.as_("owner", "GET", "/vms").json() == []
    assert_error(authed.as_("owner", "DELETE", f"/vms/{vm}"), 404, "ResourceNotFound")



def test_an_owners_history_of_a_released_vm_leaves_out_the_quarantine_as_time_travel_does(
        authed: Authed) -> None:
    # tester A, BUG 4: the owner's history showed ``Quarantined`` (the operator's reason and
    # name) while ``?version=`` of it was 404 and ``/changes`` left it out
    mine, _theirs = _two_owners_vms(authed)
    vm = mine["vm_uuid"]
    for action, body in (("quarantine", {"reason": "secret ticket OPS-1"}), ("release", None)):
        response = authed.as_("operator", "POST", f"/vms/{vm}", params={"action": action},
                              json=body)
        assert response.status_code == 200, response.text
    everything = authed.as_("auditor", "GET", f"/vms/{vm}/history").json()
    history = authed.as_("owner", "GET", f"/vms/{vm}/history").json()
    types = [e["type"] for e in history]
    assert "Quarantined" in [e["type"] for e in everything] and "Quarantined" not in types
    assert types[-1] == "Released" and "secret" not in json.dumps(history)
    for event in everything:  # one rule: an event is shown exactly where its version is
        shown = authed.as_("owner", "GET", f"/vms/{vm}", params={"version": event["version"]})
        assert (shown.status_code == 200) == (event in history), event["type"]
    paged, after = [], 0
    while page := authed.as_("owner", "GET", f"/vms/{vm}/history",
                             params={"after_version": after, "limit": 1}).json():
        paged += page
        after = page[-1]["version"]
    assert paged == history
    # the console's timeline, version and diff fragments read by the same rule
    quarantined = next(e["version"] for e in everything if e["type"] == "Quarantined")
    timeline = authed.as_("owner", "GET", f"/console/fragments/vms/{vm}")
    assert timeline.status_code == 200 and "secret" not in timeline.text
    for url, params in ((f"/console/fragments/vms/{vm}/state", {"version": quarantined}),
                        (f"/console/fragments/vms/{vm}/diff", {"from": 1, "to": quarantined})):
        assert_error(authed.as_("owner", "GET", url, params=params), 404, "ResourceNotFound")
        assert authed.as_("auditor", "GET", url, params=params).status_code == 200

def test_without_tokens_every_caller_is_an_anonymous_operator(client: TestClient) -> None:
    created = client.post("/vms", json=vm_body()).json()
    wait_job(client, created["job_uuid"])
    history = client.get(f"/vms/{created['vm_uuid']}/history").json()
    assert history[0]["cause"]["actor"] == "anonymous"
    assert client.post("/servers", json={"hostname": "h1", "ram_mib": 1024,
                                         "cpus": 1}).status_code == 201


def test_a_tokens_file_holds_hashes_and_a_bad_entry_is_refused_naming_it(tmp_path: Path) -> None:
    token, digest = new_token()
    assert hashlib.sha256(token.encode()).hexdigest() == digest
    good = tmp_path / "tokens.json"
    good.write_text(json.dumps([{"name": "ci", "role": "auditor", "sha256": digest}]))
    assert Tokens.load(good).authenticate(f"Bearer {token}").name == "ci"
    for entry, complaint in [
        ({"name": "x", "role": "root", "sha256": digest}, "role"),
        ({"name": "x", "role": "owner", "sha256": digest}, "owner_uuid"),
        ({"name": "x", "role": "auditor", "sha256": token}, "sha256"),
        ({"name": "x", "role": "auditor", "sha256": digest, "token": token}, "unknown"),
    ]:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps([entry]))
        with pytest.raises(TokenFileError, match=complaint):
            Tokens.load(bad)


def test_token_create_prints_a_token_whose_entry_holds_only_its_hash(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from service.cli.app import cli

    result = CliRunner().invoke(cli, ["token", "create", "--name", "ci", "--role", "agent",
                                      "--server-uuid", AGENT_SERVER])
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    entry = result.stderr
    assert token not in entry
    (tmp_path / "tokens.toml").write_text(entry)
    principal = Tokens.load(tmp_path / "tokens.toml").authenticate(f"Bearer {token}")
    assert (principal.name, principal.role, principal.server_uuid) == ("ci", "agent",
                                                                       AGENT_SERVER)


def test_a_route_that_would_be_served_without_authorize_stops_the_app_from_being_built():
    from fastapi import APIRouter, Depends, WebSocket

    from service.api.app import refuse_unauthorized_routes
    from service.api.auth import authorize, authorized_router

    plain = APIRouter()

    @plain.get("/unguarded")
    def unguarded() -> None: ...

    with pytest.raises(TypeError, match="/unguarded is not an AuthorizedRoute"):
        refuse_unauthorized_routes([plain])

    sockets = authorized_router()

    @sockets.websocket("/open-socket")
    async def open_socket(websocket: WebSocket) -> None: ...

    with pytest.raises(TypeError, match="/open-socket does not depend on authorize"):
        refuse_unauthorized_routes([sockets])

    guarded = authorized_router()

    @guarded.get("/guarded")
    def guarded_route() -> None: ...

    @guarded.websocket("/guarded-socket", dependencies=[Depends(authorize)])
    async def guarded_socket(websocket: WebSocket) -> None: ...

    refuse_unauthorized_routes([guarded])


def test_a_caller_who_may_not_use_a_route_is_refused_before_its_body_is_read(
        authed: Authed) -> None:
    # authorize runs first in the route's handler (AuthorizedRoute): no JSON error for a body
    # the caller was never allowed to send
    before = authed.head()
    headers = {**bearer("analyst"), "content-type": "application/json"}
    response = authed.http.post("/vms", content=b"{not json", headers=headers)
    assert_error(response, 403, "Forbidden")
    as_operator = authed.http.post("/vms", content=b"{not json",
                                   headers={**headers, **bearer("operator")})
    assert as_operator.status_code // 100 == 4 and as_operator.status_code != 403
    assert authed.head() == before
