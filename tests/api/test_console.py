"""The console's routes (docs/console.md): pages and assets need no token and load nothing from
elsewhere; fragments carry the API's roles and owner scoping and show the API's numbers; the
VM's versions are the API's folds; audit verify from the page finds an edited row, and the
fleet's audit runs a bounded page at a time. (Every route × role is walked by
tests/api/test_authorization.py; the browser tests are in tests/browser/.)"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from projections.console_queries import ConsoleQueries
from projections.vm_queries import VmFilter
from service.api.app import create_app
from service.audit.streams import MAX_PAGE, fleet_page
from service.container import Services
from tests.api.helpers import (
    OTHER_OWNER, OWNER, V2, act_and_wait, assert_error, create_running_vm, create_vm, get_vm,
    wait_job,
)
from tests.api.test_authorization import bearer, write_tokens_file
from tests.api.test_volumes import NET_A, NET_B, create_volume, mounting, volume_action
from tests.tampering import delete_stream, edit_event_bytes, edit_snapshot

PAGES = ("/console", "/console/servers", "/console/audit",
         "/console/vms/930896af-bf8c-48d4-885c-6573a94b1853")


@pytest.fixture
def authed(services: Services, tmp_path: Path) -> Iterator[TestClient]:
    """The API with one token per role (tests/api/test_authorization.py's tokens file)."""
    settings = services.settings.model_copy(
        update={"tokens_file": write_tokens_file(tmp_path / "tokens.toml")})
    with TestClient(create_app(settings, services=services, background=True)) as http:
        yield http


def _cells(html: str, attribute: str) -> dict[str, int]:
    """``{value: number}`` of the cells ``<td data-ATTRIBUTE="value">number</td>``."""
    return {name: int(number.replace(",", "")) for name, number in re.findall(
        rf'<td data-{attribute}="([^"]+)">([\d,]+)</td>', html)}


def test_pages_and_assets_need_no_token_and_allow_nothing_from_elsewhere(
        authed: TestClient) -> None:
    for path in PAGES:
        response = authed.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith("text/html")
        policy = response.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "http" not in re.sub(r'href="/[^"]*"', "", response.text)  # no outside URL
    script = authed.get("/console/static/console.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert "sessionStorage" in script.text and "localStorage" not in script.text
    assert authed.get("/console/static/console.css").status_code == 200
    # the shell names the fragment its script fetches, with the page's query
    assert 'data-fragment="/console/fragments/fleet?state=running"' in authed.get(
        "/console?state=running").text
    # the fragments are the API's, behind the token; a missing asset is 404 without one
    assert_error(authed.get("/console/fragments/fleet"), 401, "Unauthorized")
    assert authed.get("/console/static/missing.js").status_code == 404


def test_the_session_fragment_names_the_token_and_its_role(authed: TestClient) -> None:
    html = authed.get("/console/fragments/session", headers=bearer("owner")).text
    assert 'data-role="owner"' in html and OWNER in html
    assert 'data-role="auditor"' in authed.get("/console/fragments/session",
                                               headers=bearer("auditor")).text


def test_the_fleet_fragment_shows_the_apis_counts_with_its_filters(
        services: Services, client: TestClient) -> None:
    running = create_running_vm(client)
    create_running_vm(client, owner_uuid=OTHER_OWNER)
    stopped = create_running_vm(client)
    act_and_wait(client, stopped, "stop")
    head = services.commands.head_position()
    html = client.get("/console/fragments/fleet").text
    assert _cells(html, "state") == client.get("/stats/states").json()
    # live updates follow the changefeed from the position the page was read at
    assert f'data-live="/changes?after={head}"' in html
    jobs = client.get("/jobs").json()
    assert _cells(html, "execution")["succeeded"] == sum(
        j["execution"] == "succeeded" for j in jobs) == 4
    assert set(_cells(html, "read-model")) == {"vm_view", "job_view", "server_view",
                                                "analytics", "volume_mounts", "network_view"}
    filtered = client.get("/console/fragments/fleet", params={
        "owner_uuid": OWNER, "state": "running"}).text
    assert _cells(filtered, "state")["running"] == 1 and sum(
        _cells(filtered, "state").values()) == 1
    assert re.findall(r'<tr data-vm="([^"]+)"', filtered) == [running]
    # the live counter counts changes to the VMs of the page's owner and server only (it
    # counted every change of the fleet), not by state (a VM leaving it would not count)
    server_uuid = get_vm(client, running)["server_uuid"]
    on_one = client.get("/console/fragments/fleet", params={
        "owner_uuid": OWNER, "server_uuid": server_uuid, "state": "running"}).text
    assert (f'data-live="/changes?after={head}&amp;owner_uuid={OWNER}&amp;'
            f'server_uuid={server_uuid}"') in on_one
    # paging: limit and offset as on GET /vms, with the next page's link
    first = client.get("/console/fragments/fleet", params={"limit": 2}).text
    assert len(re.findall(r"<tr data-vm=", first)) == 2
    assert 'href="/console?limit=2&amp;offset=2"' in first
    assert_error(client.get("/console/fragments/fleet", params={"state": "asleep"}),
                 409, "ValidationFailed")


def test_the_chart_ends_at_the_counts_now(services: Services, client: TestClient) -> None:
    vm_uuid = create_running_vm(client)
    create_vm(client, owner_uuid=OTHER_OWNER)
    act_and_wait(client, vm_uuid, "stop")
    client.get("/console/fragments/fleet")  # read-your-writes: the analytics caught up
    queries = ConsoleQueries(services.db)
    over_time = queries.states_over_time()
    assert over_time.points[-1][1] == queries.states(VmFilter())
    assert queries.states_over_time(OTHER_OWNER).points[-1][1]["provisioning"] + \
        queries.states_over_time(OTHER_OWNER).points[-1][1]["running"] == 1
    fleet = client.get("/console/fragments/fleet").text
    assert 'data-load="/console/fragments/fleet/chart"' in fleet
    html = client.get("/console/fragments/fleet/chart").text
    states = client.get("/stats/states").json()
    shown = dict(re.findall(r'data-state="(\w+)" data-last="(\d+)"', html))
    assert shown and {s: int(n) for s, n in shown.items()} == {
        s: n for s, n in states.items() if n or s in shown}


def test_an_owners_chart_counts_a_quarantined_vm_as_its_own(services: Services,
                                                            client: TestClient) -> None:
    # it counted the VM's creation by vm_view's owner (the operator quarantine) and its
    # moves by the owner it was taken from: {"provisioning": -1, "running": 1, ...}
    create_running_vm(client)
    taken = create_running_vm(client)
    response = client.post(f"/vms/{taken}?action=quarantine", json={"reason": "lost"})
    assert response.status_code == 200, response.text
    html = client.get("/console/fragments/fleet/chart", params={"owner_uuid": OWNER}).text
    shown = {s: int(n) for s, n in re.findall(r'data-state="(\w+)" data-last="(-?\d+)"', html)}
    assert {s: n for s, n in shown.items() if n} == {"running": 1, "quarantined": 1}
    points = ConsoleQueries(services.db).states_over_time(OWNER).points
    assert all(n >= 0 for _, counts in points for n in counts.values()), points


def test_an_owner_sees_only_its_own_vms_and_others_are_404(authed: TestClient) -> None:
    mine = create_vm(authed, headers=bearer("owner"))["vm_uuid"]
    theirs = create_vm(authed, headers=bearer("owner_b"), owner_uuid=OTHER_OWNER)["vm_uuid"]
    for asked in ({}, {"owner_uuid": OTHER_OWNER}):
        html = authed.get("/console/fragments/fleet", params=asked,
                          headers=bearer("owner")).text
        # the live feed asks /changes what the page was asked (it yields nothing there too)
        html = re.sub(r'data-live="[^"]*"', "", html)
        assert theirs not in html and OTHER_OWNER not in html
    assert mine in authed.get("/console/fragments/fleet", headers=bearer("owner")).text
    for path in ("", "/state", "/state?version=1", "/diff?from=1&to=1"):
        response = authed.get(f"/console/fragments/vms/{theirs}{path}", headers=bearer("owner"))
        assert_error(response, 404, "ResourceNotFound")
        assert authed.get(f"/console/fragments/vms/{mine}{path}",
                          headers=bearer("owner")).status_code == 200
    assert_error(authed.post("/console/fragments/audit", headers=bearer("owner")),
                 403, "Forbidden")
    assert_error(authed.get(f"/console/fragments/vms/{mine}", headers=bearer("analyst")),
                 403, "Forbidden")


def test_the_fleet_links_a_vm_only_for_roles_that_may_open_its_page(
    authed: TestClient,
) -> None:
    vm = create_vm(authed, headers=bearer("owner"))["vm_uuid"]
    for role, links in [("operator", True), ("auditor", True), ("owner", True),
                        ("analyst", False)]:
        html = authed.get("/console/fragments/fleet", headers=bearer(role)).text
        assert f"<code>{vm}</code>" in html, role
        assert (f'href="/console/vms/{vm}"' in html) is links, role


def test_a_vms_versions_and_instants_are_the_apis_folds(client: TestClient) -> None:
    vm_uuid = create_running_vm(client)
    act_and_wait(client, vm_uuid, "stop")
    now = get_vm(client, vm_uuid)
    page = client.get(f"/console/fragments/vms/{vm_uuid}").text
    history = client.get(f"/vms/{vm_uuid}/history").json()
    assert re.findall(r'data-type="(\w+)"', page) == [e["type"] for e in history]
    assert 'class="kind-state" data-version="1" data-type="Created"' in page
    assert f'max="{now["version"]}"' in page
    for version in range(1, now["version"] + 1):
        state = client.get(f"/console/fragments/vms/{vm_uuid}/state",
                           params={"version": version}).text
        expected = get_vm(client, vm_uuid, version=version)
        assert f'data-version="{version}"' in state
        assert f'data-testid="state-state">{expected["state"]}<' in state
    at = history[2]["timestamp"]
    assert f'data-version="{get_vm(client, vm_uuid, at=at)["version"]}"' in client.get(
        f"/console/fragments/vms/{vm_uuid}/state", params={"at": at}).text
    assert_error(client.get(f"/console/fragments/vms/{vm_uuid}/state",
                            params={"version": now["version"] + 1}), 404, "ResourceNotFound")
    diff = client.get(f"/console/fragments/vms/{vm_uuid}/diff",
                      params={"from": 1, "to": now["version"]}).text
    assert {"state", "version", "server_uuid"} <= set(re.findall(r'data-field="([^"]+)"', diff))
    assert_error(client.get(f"/console/fragments/vms/{vm_uuid}/diff", params={"to": 2}),
                 409, "ValidationFailed")


def test_audit_from_the_page_finds_an_edited_row_naming_its_version(
        services: Services, client: TestClient) -> None:
    vm_uuid = create_running_vm(client)
    ok = client.post("/console/fragments/audit", params={"vm_uuid": vm_uuid}).text
    assert 'data-failed="0" data-checked="1"' in ok
    version = get_vm(client, vm_uuid)["version"]
    with services.db.transaction() as tx:
        tx.execute("UPDATE job_view SET execution = 'failed' WHERE vm_uuid = ?", (vm_uuid,))
    found = client.post("/console/fragments/audit", params={"vm_uuid": vm_uuid}).text
    assert 'data-failed="1"' in found
    assert re.search(r"read model: job_view row [0-9a-f-]{36}: differs from a fresh fold "
                     r"in execution", found), found
    with services.db.transaction() as tx:
        tx.execute("UPDATE vm_view SET alias = 'edited' WHERE uuid = ?", (vm_uuid,))
    assert f"vm_view row {vm_uuid} version {version}: differs from a fresh fold in alias" in \
        client.post("/console/fragments/audit", params={"vm_uuid": vm_uuid}).text


def test_auditing_a_uuid_nothing_holds_is_404_as_getvm_answers(services: Services,
                                                               client: TestClient) -> None:
    # found by a new user: it reported an integrity failure ("1 of 1 VMs differ ... the log
    # has no VM stream of this uuid") for a uuid GET /vms/{uuid} answers 404 for
    server_uuid = client.get("/servers").json()[0]["uuid"]  # a stream, but not a VM's
    for unknown in ("00000000-0000-4000-8000-000000000000", OTHER_OWNER, server_uuid):
        assert_error(client.get(f"/vms/{unknown}"), 404, "ResourceNotFound")
        assert_error(client.post("/console/fragments/audit", params={"vm_uuid": unknown}),
                     404, "ResourceNotFound")
    # read-model rows that outlived their VM's stream are a finding, not an unknown VM
    vm_uuid = create_running_vm(client)
    delete_stream(services, vm_uuid)
    found = client.post("/console/fragments/audit", params={"vm_uuid": vm_uuid})
    assert found.status_code == 200
    assert 'data-failed="1"' in found.text
    assert "the log has no VM stream of this uuid" in found.text


def test_the_fleet_audit_runs_a_bounded_page_at_a_time(services: Services,
                                                       client: TestClient) -> None:
    created = [create_vm(client) for _ in range(5)]
    for job in created:
        wait_job(client, job["job_uuid"])
    audits, after = fleet_page(services, limit=2)
    assert [a.vm_uuid for a in audits] == [c["vm_uuid"] for c in created[:2]]
    assert all(a.ok for a in audits) and after is not None
    html = client.post("/console/fragments/audit", params={"after": after, "limit": 3}).text
    assert re.findall(r'<tr data-vm="([^"]+)"', html) == [c["vm_uuid"] for c in created[2:]]
    assert 'data-testid="audit-end"' in html
    assert_error(client.post("/console/fragments/audit", params={"limit": MAX_PAGE + 1}),
                 409, "ValidationFailed")


def test_the_servers_fragment_shows_the_apis_capacity_and_networks(client: TestClient) -> None:
    assert "No networks yet" in client.get("/console/fragments/servers").text
    network = client.post("/networks", json={
        "name": "external", "subnet": "10.88.0.0/24", "provision_start_ip": "10.88.0.10",
        "provision_end_ip": "10.88.0.19"}).json()
    create_running_vm(client, networks=[network["uuid"]])
    servers = client.get("/servers").json()
    html = client.get("/console/fragments/servers").text
    assert f'<td data-key="servers">{len(servers)}</td>' in html
    for server in servers:
        row = html[html.index(f'data-server="{server["uuid"]}"'):]
        assert f'<span data-key="ram_free_mib">{server["ram_free_mib"]:,}</span>' in row
        assert f'<td data-key="vm_count">{server["vm_count"]}</td>' in row
    [listed] = client.get("/networks").json()
    assert listed["addresses_in_use"] == 1
    row = html[html.index(f'data-network="{network["uuid"]}"'):]
    assert '<span data-key="addresses_in_use">1</span> / <span data-key="addresses_free">9' in row


def test_audit_from_the_page_names_an_edited_event_by_stream_and_version(
        services: Services, client: TestClient) -> None:
    vm_uuid = create_running_vm(client)
    act_and_wait(client, vm_uuid, "update", json={"alias": "database"})
    version = next(e["version"] for e in client.get(f"/vms/{vm_uuid}/history").json()
                   if e["type"] == "MetadataUpdated")
    edit_event_bytes(services, vm_uuid, version, b'"database"', b'"datab4se"')
    html = client.post("/console/fragments/audit", params={"vm_uuid": vm_uuid}).text
    assert f"tampered: stream {vm_uuid} version {version}: the event&#39;s content" in html


def test_the_deepest_queues_come_first(paused) -> None:
    deep = create_vm(paused.http)["vm_uuid"]
    shallow = create_vm(paused.http)["vm_uuid"]
    for action in ("stop", "start"):  # v2 queues them behind the provision
        assert paused.http.post(f"/vms/{deep}", params={"action": action},
                                headers=V2).status_code == 202
    html = paused.http.get("/console/fragments/fleet").text
    queues = html[html.index('data-testid="queues"'):]
    assert re.findall(r'<a href="/console/vms/([^"]+)"><code>[^<]+</code></a></td><td>(\d+)<',
                      queues)[:2] == [(deep, "3"), (shallow, "1")]
    assert _cells(html, "execution")["queued"] == 4


def test_a_vms_page_shows_its_stale_mounts_and_its_audit_folds_the_volumes_too(
        services: Services, client: TestClient) -> None:
    volume = create_volume(client, networks={NET_A: "10.0.0.5"})
    vm_uuid = create_running_vm(client, volumes=mounting(volume["uuid"], "/srv/data"))
    fresh = client.get(f"/console/fragments/vms/{vm_uuid}").text
    assert "<tr><td><code>" + volume["uuid"] in fresh and "current" in fresh
    attached = volume_action(client, volume["uuid"], "attach_network", network_uuid=NET_B,
                             address="192.168.7.20")
    assert attached.status_code == 202, attached.text
    page = client.get(f"/console/fragments/vms/{vm_uuid}").text
    assert '<tr class="stale"><td><code>' + volume["uuid"] in page
    assert "10.0.0.5,192.168.7.20" in page and "stale: reboot to refresh" in page
    # the fleet's list takes GET /vms's stale_mounts filter
    listed = client.get("/console/fragments/fleet", params={"stale_mounts": "true"}).text
    assert re.findall(r'<tr data-vm="([^"]+)"', listed) == [vm_uuid]
    # the mount's row is folded from the VM's stream and the volume's, and equals the live one
    audit = client.post("/console/fragments/audit", params={"vm_uuid": vm_uuid}).text
    assert 'data-failed="0" data-checked="1"' in audit
    with services.db.transaction() as tx:
        tx.execute("UPDATE volume_mounts SET address_at_boot = address WHERE vm_uuid = ?",
                   (vm_uuid,))
    assert f"volume_mounts row {vm_uuid}//srv/data: differs from a fresh fold in " \
        "address_at_boot" in client.post("/console/fragments/audit",
                                         params={"vm_uuid": vm_uuid}).text


def test_a_jobs_chain_results_are_shown_as_the_api_gives_them_in_json(client: TestClient
                                                                      ) -> None:
    # found by a new user: a structured result showed as Python's {'state': 'running', ...}
    vm_uuid = create_running_vm(client)
    page = client.get(f"/console/fragments/vms/{vm_uuid}").text
    [shown] = re.findall(r"ensure_state: ([^<]*)<", page)
    assert json.loads(html.unescape(shown)) == {"state": "running", "incarnation": 1}
    assert "place: " + get_vm(client, vm_uuid)["server_uuid"] in page  # text stays as it is


def test_audit_from_the_page_checks_the_vms_snapshots_too(services: Services,
                                                          client: TestClient) -> None:
    # found in review: the page's audit of a VM left out its snapshots, which loads trust
    from uuid import UUID

    vm_uuid = create_running_vm(client)
    act_and_wait(client, vm_uuid, "update", json={"alias": "sealed"})
    version = services.commands.load(vm_uuid).version
    services.app.take_snapshot(UUID(vm_uuid), version=version)
    clean = client.post("/console/fragments/audit", params={"vm_uuid": vm_uuid}).text
    assert "snapshot:" not in clean
    edit_snapshot(services, vm_uuid, b'"sealed"', b'"5ealed"')
    html = client.post("/console/fragments/audit", params={"vm_uuid": vm_uuid}).text
    assert f"snapshot: snapshot {vm_uuid} version {version}: differs from a fresh fold" in html


def _accepted_by_changes(url: str, principal: Any) -> bool:
    """Whether ``GET /changes`` accepts ``url``'s query for ``principal`` (its parsing, which
    the route runs before it streams)."""
    from starlette.requests import Request

    from service.api.errors import ApiError
    from service.api.routes_changes import parse_stream_request

    path, _, query = url.partition("?")
    request = Request({"type": "http", "method": "GET", "path": path, "headers": [],
                       "query_string": query.encode(), "state": {"principal": principal}})
    try:
        parse_stream_request(request)
    except ApiError:
        return False
    return True


def test_an_owners_fleet_asked_for_another_owner_counts_an_accepted_feed(
        authed: TestClient) -> None:
    """The live counter's feed is a request ``GET /changes`` accepts: an owner asking for
    another owner's fleet got ``owner_uuid=nobody``, refused ``Invalid UUID``, and the counter
    vanished (console tester, bug 2). Asking for another owner's yields nothing, there too."""
    from service.api.tokens import Principal

    owner = Principal("owner", "owner", owner_uuid=OWNER)
    for asked in ({}, {"owner_uuid": OTHER_OWNER}, {"owner_uuid": OWNER}):
        text = authed.get("/console/fragments/fleet", params=asked,
                          headers=bearer("owner")).text
        live = html.unescape(re.search(r'data-live="([^"]+)"', text).group(1))
        assert "nobody" not in live and _accepted_by_changes(live, owner), (asked, live)
