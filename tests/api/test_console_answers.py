"""How the console answers (docs/console.md): a path with a trailing ``/`` is served as without
it, as every API path is; a page that is not found says so under a heading, and is a 404
whenever the shell alone can tell; every answer under ``/console/fragments/`` carries the
pages' security headers; an object shown in a page's text is JSON, never a Python repr.
(Found by a tester of the console.)"""

from __future__ import annotations

import html
import json
import re

import pytest
from fastapi.testclient import TestClient

from service.console.render import render
from tests.api.helpers import assert_error, create_vm, wait_job
from tests.api.test_authorization import bearer
from tests.api.test_console import authed  # noqa: F401 (a fixture: tokens configured)

VM = "930896af-bf8c-48d4-885c-6573a94b1853"
# what is tested here is the console's, not the database's
ON_SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
SECURITY = ("content-security-policy", "x-content-type-options", "x-frame-options",
            "referrer-policy")


def _fragment_of(shell: str) -> str | None:
    found = re.search(r'data-fragment="([^"]+)"', shell)
    return html.unescape(found.group(1)) if found else None


@ON_SQLITE
@pytest.mark.parametrize(("path", "fragment"), [
    ("/console/", "/console/fragments/fleet"),
    ("/console/servers/", "/console/fragments/servers"),
    ("/console/audit/", "/console/fragments/audit"),
    (f"/console/vms/{VM}/", f"/console/fragments/vms/{VM}"),
    ("/console/servers/?offset=50", "/console/fragments/servers?offset=50"),
])
def test_a_console_page_with_a_trailing_slash_is_served_as_without_it(
        authed: TestClient, path: str, fragment: str) -> None:
    # /console/ and the fragments took one; /console/servers/ and the others answered 404
    response = authed.get(path)
    assert response.status_code == 200, response.text
    assert _fragment_of(response.text) == fragment
    assert authed.head(path).status_code == 200


@ON_SQLITE
def test_the_console_assets_and_fragments_take_a_trailing_slash_too(
        authed: TestClient) -> None:
    assert authed.get("/console/static/console.css/").headers["content-type"].startswith(
        "text/css")
    for path in ("/console/fragments/servers/", "/console/fragments/audit/",
                 "/console/fragments/fleet/chart/"):
        assert authed.get(path, headers=bearer("operator")).status_code == 200, path


@ON_SQLITE
def test_a_vm_page_no_vm_can_have_is_a_404_page_with_a_heading(authed: TestClient) -> None:
    # /console/vms/garbage answered 200, and its fragment's 404 showed as one line under no
    # heading: no VM's uuid is "garbage", which the shell can tell without a token
    for path in ("/console/vms/garbage", "/console/vms/930896af-bf8c"):
        response = authed.get(path)
        assert response.status_code == 404, path
        assert re.search(r"<h1[^>]*>Not found</h1>", response.text), response.text
        assert "No console page at this address" in response.text
    # a uuid may name a VM: whether it does is behind the token (the fragment's 404, which
    # the page shows under its own heading: tests/browser/test_console_pages.py)
    assert authed.get(f"/console/vms/{VM.upper()}").status_code == 200
    assert_error(authed.get(f"/console/fragments/vms/{VM}", headers=bearer("operator")),
                 404, "ResourceNotFound")


@ON_SQLITE
def test_every_fragment_answer_carries_the_pages_security_headers(authed: TestClient) -> None:
    # the shells had them; the fragments, HTML the script inserts into the page, had none
    page = authed.get("/console")
    answers = [
        authed.get("/console/fragments/fleet", headers=bearer("operator")),
        authed.get("/console/fragments/servers", headers=bearer("analyst")),
        authed.get("/console/fragments/audit"),  # 401, the API's JSON
        authed.get("/console/fragments/audit", headers=bearer("analyst")),  # 403
        authed.get(f"/console/fragments/vms/{VM}", headers=bearer("operator")),  # 404
        authed.get("/console/fragments/nope", headers=bearer("operator")),
        authed.get("/console/static/missing.js"),
        authed.post("/console/servers"),  # a page answers GET and HEAD only
    ]
    assert [a.status_code for a in answers] == [200, 200, 401, 403, 404, 404, 404, 405]
    for answer in answers:
        for name in SECURITY:
            assert answer.headers.get(name) == page.headers[name], (answer.url, name)
        assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    # a fragment is still never cached, where a shell is revalidated
    assert answers[0].headers["cache-control"] == "no-store"
    assert page.headers["cache-control"] == "no-cache"


@ON_SQLITE
def test_a_failed_vms_error_shows_as_json_on_its_page(client: TestClient) -> None:
    # it read "error: {'reason': 'provision_failed', ...}", a Python dict
    created = create_vm(client, internal_metadata={"force_provision_failure": True})
    assert wait_job(client, created["job_uuid"])["execution"] == "failed"
    error = client.get(f"/vms/{created['vm_uuid']}").json()["error"]
    assert isinstance(error, dict)
    page = html.unescape(client.get(f"/console/fragments/vms/{created['vm_uuid']}").text)
    shown = re.search(r'<span class="error"[^>]*>error: (.*?)</span>', page, re.DOTALL).group(1)
    assert shown.startswith("{") and "'" not in shown, shown
    assert json.loads(shown) == error


def test_any_object_a_template_shows_as_text_is_json() -> None:
    # the kind, not the one field: every dict or list printed by a template reads as JSON
    shown = html.unescape(render("vm_state.html", vm={
        "version": 3, "state": {"odd": ["x", 1]}, "last_modified": ["t"]}, newest=3))
    assert 'state-{"odd": ["x", 1]}' in shown and 'as of ["t"]' in shown
    assert "{'" not in shown and "['" not in shown
