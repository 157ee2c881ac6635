"""The console's pages in Chromium against a replayed slice of the trace: the numbers shown
equal the API's, a VM steps back through its versions showing what ``?version=`` answers, the
audit runs from the page, and an owner's token never shows another owner's VM."""

from __future__ import annotations

import json
from typing import Any

from tests.browser.conftest import THIRD_OWNER, Console, screenshot, sign_in

STATES = ("provisioning", "running", "stopped", "failed", "destroyed", "quarantined")


def _number(text: str) -> int:
    return int(text.replace(",", "").strip())


def _all_jobs(console: Console, role: str, **params: Any) -> list[dict[str, Any]]:
    jobs, offset = [], 0
    while True:
        page = console.get(role, "/jobs", limit=1000, offset=offset, **params)
        jobs += page
        if len(page) < 1000:
            return jobs
        offset += 1000


def _count(console: Console, role: str, **params: Any) -> int:
    response = console.api(role, "HEAD", "/vms", params=params)
    assert response.status_code == 200
    return int(response.headers["x-joyent-resource-count"])


def test_the_fleet_page_shows_the_apis_numbers(page: Any, console: Console) -> None:
    sign_in(page, console, "auditor")
    states = console.get("auditor", "/stats/states")
    for state in STATES:
        shown = page.locator(f"[data-testid=states] td[data-state={state}]").inner_text()
        assert _number(shown) == states[state], state
    assert _number(page.get_by_test_id("states-total").inner_text()) == _count(
        console, "auditor") == sum(states.values())
    # the chart's last point is the counts now
    page.wait_for_selector("[data-testid=chart]")
    for line in page.locator("[data-testid=chart] polyline").all():
        assert int(line.get_attribute("data-last")) == states[line.get_attribute("data-state")]
    jobs = _all_jobs(console, "auditor")
    for execution in ("queued", "running", "succeeded", "failed", "canceled"):
        shown = page.locator(f"[data-testid=jobs] td[data-execution={execution}]").inner_text()
        assert _number(shown) == sum(j["execution"] == execution for j in jobs), execution
    quarantined = console.get("auditor", "/vms", state="quarantined")
    assert _number(page.get_by_test_id("quarantined-total").inner_text()) == len(quarantined)
    assert [r.get_attribute("href") for r in page.locator(
        "[data-testid=quarantined] a").all()] == [f"/console/vms/{vm['uuid']}"
                                                   for vm in quarantined]
    lag = page.locator("[data-testid=lag] td")
    assert lag.count() == len(console.services.projections.read_models)
    assert all(_number(t) >= 0 for t in lag.all_inner_texts())
    first = console.get("auditor", "/vms", limit=50, sort="create_timestamp.asc")
    rows = page.locator("[data-testid=vms] tbody tr")
    assert [r.get_attribute("data-vm") for r in rows.all()] == [vm["uuid"] for vm in first]
    screenshot(page, console, "fleet")

    # live: the changefeed's new changes are counted, and "refresh" shows them
    created = console.api("operator", "POST", "/vms", json={
        "owner_uuid": THIRD_OWNER, "brand": "joyent", "ram": 256})
    assert created.status_code == 202, created.text
    page.locator("[data-testid=live-count]:not(:text-is('0'))").wait_for()
    page.get_by_test_id("live-refresh").click()
    page.locator(f"[data-testid=states-total]:text-is('{_count(console, 'auditor'):,}')"
                 ).wait_for()
    page.locator("[data-testid=live-count]:text-is('0')").wait_for()

    # filters are applied in SQL: the list, the count and the page range follow them
    page.locator("[data-testid=filters] select[name=state]").select_option("destroyed")
    page.locator("[data-testid=filters] button[type=submit]").click()
    page.wait_for_selector("#content[data-status='200'] [data-testid=vms]")
    destroyed = _count(console, "auditor", state="destroyed")
    assert _number(page.get_by_test_id("states-total").inner_text()) == destroyed
    states_shown = {t.strip() for t in page.locator(
        "[data-testid=vms] tbody td:nth-child(3)").all_inner_texts()}
    assert states_shown == {"destroyed"}
    page.get_by_test_id("next").click()
    page.wait_for_selector("#content[data-status='200'] [data-testid=vms]")
    assert page.get_by_test_id("vm-range").inner_text().startswith("51–")
    second = console.get("auditor", "/vms", limit=50, offset=50, state="destroyed",
                         sort="create_timestamp.asc")
    assert [r.get_attribute("data-vm") for r in rows.all()] == [vm["uuid"] for vm in second]


def _vm_with_most_versions(console: Console) -> dict[str, Any]:
    with console.services.db.transaction(commit=False) as tx:
        tx.execute("SELECT uuid FROM vm_view ORDER BY version DESC, uuid LIMIT 1")
        vm_uuid = tx.fetchone()["uuid"]
    return console.get("auditor", f"/vms/{vm_uuid}")


def test_a_vm_steps_back_through_its_versions_showing_what_the_api_folds(
        page: Any, console: Console) -> None:
    vm = _vm_with_most_versions(console)
    history = console.get("auditor", f"/vms/{vm['uuid']}/history")
    sign_in(page, console, "auditor", f"/console/vms/{vm['uuid']}")
    timeline = page.locator("[data-testid=timeline] li")
    assert timeline.count() == len(history) == vm["version"]
    assert [li.get_attribute("data-type") for li in timeline.all()] == [
        e["type"] for e in history]
    assert "kind-failure" in " ".join(li.get_attribute("class") for li in timeline.all())
    state = page.get_by_test_id("state")
    page.wait_for_selector(f"[data-testid=state-version][data-version='{vm['version']}']")
    screenshot(page, console, "vm")
    for version in range(vm["version"] - 1, 0, -1):
        page.get_by_test_id("step-back").click()
        page.wait_for_selector(f"[data-testid=state-version][data-version='{version}']")
        expected = console.get("auditor", f"/vms/{vm['uuid']}", version=version)
        shown = json.loads(state.get_by_test_id("state-object").inner_text())
        assert shown == expected, version
        assert state.get_by_test_id("state-state").inner_text() == expected["state"]
    assert page.get_by_test_id("slider").input_value() == "1"

    # a timeline entry's "show" jumps to its version; the diff names what changed
    timeline.nth(2).locator("a.show").click()
    page.wait_for_selector("[data-testid=state-version][data-version='3']")
    page.locator("[data-testid=diff-form] input[name=from]").fill("1")
    page.locator("[data-testid=diff-form] input[name=to]").fill(str(vm["version"]))
    page.locator("[data-testid=diff-form] button").click()
    page.wait_for_selector("[data-testid=diff]")
    changed = {r.get_attribute("data-field") for r in page.locator(
        "[data-testid=diff] tbody tr").all()}
    first = console.get("auditor", f"/vms/{vm['uuid']}", version=1)
    assert {"state", "version", "last_modified"} <= changed
    assert ("state" in changed) == (first["state"] != vm["state"])
    jobs = console.get("auditor", f"/vms/{vm['uuid']}/jobs")
    assert page.locator("[data-testid=vm-jobs] tbody tr").count() == len(jobs)


def test_the_servers_page_shows_the_capacity_the_api_reports(page: Any,
                                                              console: Console) -> None:
    sign_in(page, console, "analyst", "/console/servers")
    servers = console.get("analyst", "/servers")
    capacity = page.get_by_test_id("capacity")
    assert _number(capacity.locator("[data-key=servers]").inner_text()) == len(servers)
    used, total = capacity.locator("[data-key=ram]").inner_text().split("/")
    assert _number(used) == sum(s["ram_allocated_mib"] for s in servers)
    assert _number(total) == sum(s["ram_mib"] for s in servers)
    by_uuid = {s["uuid"]: s for s in servers}
    for row in page.locator("[data-testid=servers] tbody tr").all()[:10]:
        server = by_uuid[row.get_attribute("data-server")]
        for key in ("ram_allocated_mib", "ram_free_mib", "vm_count"):
            assert _number(row.locator(f"[data-key={key}]").inner_text()) == server[key]
    networks = console.get("analyst", "/networks")
    assert networks and page.locator("[data-testid=networks] tbody tr").count() == len(networks)
    for network in networks:
        row = page.locator(f"[data-testid=networks] tr[data-network='{network['uuid']}']")
        for key in ("addresses_in_use", "addresses_free"):
            assert _number(row.locator(f"[data-key={key}]").inner_text()) == network[key]
    screenshot(page, console, "servers")


def test_the_audit_runs_from_the_page_and_names_a_tampered_row(page: Any,
                                                               console: Console) -> None:
    vm = _vm_with_most_versions(console)
    sign_in(page, console, "auditor", "/console/audit")
    page.locator("[data-testid=audit-fleet] button").click()
    page.wait_for_selector("[data-testid=audit-summary]")
    summary = page.get_by_test_id("audit-summary")
    assert (summary.get_attribute("data-checked"), summary.get_attribute("data-failed")) == (
        "50", "0")
    first_page = [r.get_attribute("data-vm") for r in page.locator(
        "[data-testid=audits] tbody tr").all()]
    page.get_by_test_id("audit-next").click()
    page.locator(f"[data-testid=audits] tr[data-vm='{first_page[0]}']").wait_for(
        state="detached")
    page.wait_for_selector("[data-testid=audit-summary]")
    second_page = [r.get_attribute("data-vm") for r in page.locator(
        "[data-testid=audits] tbody tr").all()]
    assert len(second_page) == 50 and not set(first_page) & set(second_page)

    # an edited read-model row is found, naming the table, the row and the version
    with console.services.db.transaction() as tx:
        tx.execute("UPDATE vm_view SET state = 'stopped' WHERE uuid = ?", (vm["uuid"],))
    try:
        page.locator("[data-testid=audit-vm] input[name=vm_uuid]").fill(vm["uuid"])
        page.locator("[data-testid=audit-vm] button").click()
        page.wait_for_selector("[data-testid=audit-summary][data-failed='1']")
        finding = page.locator("[data-testid=audits] td[data-check=read-models]").inner_text()
        assert f"vm_view row {vm['uuid']} version {vm['version']}" in finding
        assert "state" in finding
        assert page.locator("[data-testid=audits] td[data-check=chain]").inner_text() == "intact"
        screenshot(page, console, "audit")
    finally:
        with console.services.db.transaction() as tx:
            tx.execute("UPDATE vm_view SET state = ? WHERE uuid = ?", (vm["state"], vm["uuid"]))


def test_an_owner_token_never_shows_another_owners_vm(page: Any, console: Console) -> None:
    mine, theirs = console.owners["owner_a"], console.owners["owner_b"]
    sign_in(page, console, "owner_a")
    assert page.get_by_test_id("who").get_attribute("data-role") == "owner"
    assert page.locator("nav a:visible").all_inner_texts() == ["Fleet"]
    owners = {r.get_attribute("data-owner") for r in page.locator(
        "[data-testid=vms] tbody tr").all()}
    assert owners == {mine}
    assert _number(page.get_by_test_id("states-total").inner_text()) == _count(
        console, "owner_a") == _count(console, "auditor", owner_uuid=mine)
    screenshot(page, console, "owner")
    # a quarantined VM is the operator quarantine's: its previous owner no longer sees it
    quarantined = console.get("auditor", "/vms", state="quarantined")[0]
    assert quarantined["quarantine"]["previous_owner_uuid"] == theirs
    fleet_b = console.api("owner_b", "GET", "/console/fragments/fleet").text
    assert quarantined["uuid"] not in fleet_b
    # asking for the other owner's VMs by URL shows none
    page.goto(f"{console.url}/console?owner_uuid={theirs}")
    page.wait_for_selector("#content[data-status='200']")
    assert _number(page.get_by_test_id("states-total").inner_text()) == 0
    assert page.locator("[data-testid=vms] tbody tr").count() == 0
    # another owner's VM page, its versions and diff are 404, and show nothing of it
    other = console.get("auditor", "/vms", owner_uuid=theirs, limit=1)[0]
    page.goto(f"{console.url}/console/vms/{other['uuid']}")
    page.wait_for_selector("#content[data-status='404']")
    assert page.get_by_test_id("error").inner_text().startswith("404 ResourceNotFound")
    assert page.locator("[data-testid=timeline]").count() == 0
    for path in ("", "/state?version=1", "/diff?from=1&to=2"):
        response = console.api("owner_a", "GET", f"/console/fragments/vms/{other['uuid']}{path}")
        assert response.status_code == 404, path
        assert theirs not in response.text
    # the audit page is not an owner's
    page.goto(f"{console.url}/console/audit")
    page.wait_for_selector("#content[data-status='403']")


def test_the_token_stays_in_the_tabs_session_storage(page: Any, browser: Any,
                                                     console: Console) -> None:
    page.goto(f"{console.url}/console")
    page.wait_for_selector("#login:not([hidden])")
    assert page.locator("#login-error").is_hidden()  # nothing tried yet, nothing wrong
    page.locator("#login input[name=token]").fill("not-a-token")
    page.locator("#login button[type=submit]").click()
    page.locator("#login-error:text-is('401 Unauthorized: unknown token')").wait_for()
    assert page.locator("#content").is_hidden()
    sign_in(page, console, "analyst")
    assert page.evaluate("sessionStorage.length") == 1
    assert page.evaluate("localStorage.length") == 0
    assert page.context.cookies() == []
    # an analyst lists VMs but may not open one (GetVm is not an analyst's)
    vm_uuid = page.locator("[data-testid=vms] tbody tr").first.get_attribute("data-vm")
    page.goto(f"{console.url}/console/vms/{vm_uuid}")
    page.wait_for_selector("#content[data-status='403']")
    # another tab of another context starts signed out; signing out forgets the token
    other = browser.new_context().new_page()
    other.goto(f"{console.url}/console")
    other.wait_for_selector("#login:not([hidden])")
    other.context.close()
    page.goto(f"{console.url}/console")
    page.wait_for_selector("#content[data-status='200']")
    page.get_by_test_id("logout").click()
    page.wait_for_selector("#login:not([hidden])")
    assert page.evaluate("sessionStorage.length") == 0
