"""A VM's page in Chromium: the version slider offers an owner only the versions it may see;
stepped quickly, it shows the version it names whatever order the answers come in; after an
instant, it names the version the instant showed. (Found by a tester of the console.)"""

from __future__ import annotations

from typing import Any

from tests.browser.conftest import Console, sign_in


def _quarantined_and_released(console: Console, owner: str) -> dict[str, Any]:
    """One of ``owner``'s running VMs, quarantined and given back by an operator."""
    vm = console.get("operator", "/vms", owner_uuid=console.owners[owner], state="running",
                     limit=1, sort="create_timestamp.desc")[0]
    for action, body in (("quarantine", {"reason": "console test"}), ("release", {})):
        response = console.api("operator", "POST", f"/vms/{vm['uuid']}",
                               params={"action": action}, json=body)
        assert response.status_code == 200, response.text
    return console.get("operator", f"/vms/{vm['uuid']}")


def test_an_owners_slider_steps_over_the_versions_it_may_not_see(
        page: Any, console: Console) -> None:
    # one click on ◀ after a release asked for the Quarantined version: 404 to the owner
    vm = _quarantined_and_released(console, "owner_a")
    newest = vm["version"]
    sign_in(page, console, "owner_a", f"/console/vms/{vm['uuid']}")
    page.wait_for_selector(f"[data-testid=state-version][data-version='{newest}']")
    page.get_by_test_id("step-back").click()
    page.wait_for_selector(f"[data-testid=state-version][data-version='{newest - 2}']")
    assert page.get_by_test_id("slider").input_value() == str(newest - 2)
    assert page.get_by_test_id("slider-value").inner_text() == str(newest - 2)
    page.get_by_test_id("step-forward").click()
    page.wait_for_selector(f"[data-testid=state-version][data-version='{newest}']")
    # dragged onto the hidden version, the slider settles on the one below it
    page.get_by_test_id("slider").fill(str(newest - 1))
    page.wait_for_selector(f"[data-testid=state-version][data-version='{newest - 2}']")
    assert page.get_by_test_id("slider").input_value() == str(newest - 2)
    # the diff offered compares versions the owner may see
    page.locator("[data-testid=diff-form] button").click()
    page.wait_for_selector("[data-testid=diff]")
    assert page.get_by_test_id("error").count() == 0


def test_the_slider_shows_the_version_it_names_whatever_order_the_answers_come_in(
        page: Any, console: Console) -> None:
    # ◀ twice quickly, the first answer last: the slider said N-2 and the page showed N-1
    vm = console.get("auditor", "/vms", state="running", limit=1)[0]
    newest = vm["version"]
    held: list[Any] = []  # the first step's request, answered only after the second's
    failed: list[str] = []

    def answer(route: Any) -> None:
        if not held and f"version={newest - 1}" in route.request.url:
            held.append(route)
        else:
            route.continue_()

    sign_in(page, console, "auditor", f"/console/vms/{vm['uuid']}")
    page.wait_for_selector(f"[data-testid=state-version][data-version='{newest}']")
    page.route("**/state?version=*", answer)
    page.on("requestfailed", lambda request: failed.append(request.url))
    page.get_by_test_id("step-back").click()
    page.get_by_test_id("step-back").click()
    page.wait_for_selector(f"[data-testid=state-version][data-version='{newest - 2}']")
    assert len(held) == 1
    # here, not at the top: the default suite collects this file without Playwright
    from playwright.sync_api import Error

    try:  # the page gave up the first request when it asked the second ...
        with page.expect_event("requestfinished", lambda r: r.url == held[0].request.url,
                               timeout=5000):
            held[0].continue_()
    except Error:
        pass
    # ... so its answer, let through now, shows nothing
    assert failed == [held[0].request.url]
    assert page.get_by_test_id("slider").input_value() == str(newest - 2)
    assert page.locator("[data-testid=state-version]").get_attribute("data-version") == str(
        newest - 2)


def test_after_an_instant_the_slider_names_the_version_shown(page: Any, console: Console) -> None:
    # the at-form showed version 5 while the slider and its output still said 21, and ◀
    # then loaded 20: what is shown is always the version the slider names
    vm = console.get("auditor", "/vms", state="running", limit=1)[0]
    history = console.get("auditor", f"/vms/{vm['uuid']}/history")
    times = {e["version"]: e["timestamp"] for e in history}
    # a version whose instant is its own (the next one's is later), well before the newest
    version = max(v for v in times if v + 1 in times and times[v] < times[v + 1]
                  and v < vm["version"] - 1)
    sign_in(page, console, "auditor", f"/console/vms/{vm['uuid']}")
    page.wait_for_selector(f"[data-testid=state-version][data-version='{vm['version']}']")
    page.locator("[data-testid=at-form] input[name=at]").fill(times[version])
    page.locator("[data-testid=at-form] button").click()
    page.wait_for_selector(f"[data-testid=state-version][data-version='{version}']")
    assert page.get_by_test_id("slider").input_value() == str(version)
    assert page.get_by_test_id("slider-value").inner_text() == str(version)
    page.get_by_test_id("step-back").click()
    page.wait_for_selector(f"[data-testid=state-version][data-version='{version - 1}']")
    assert page.get_by_test_id("slider-value").inner_text() == str(version - 1)
