"""Every console page in Chromium: none scrolls sideways in a window 420 px wide (the networks'
table pushed the servers page to the side), and a page whose VM is not found says so under a
heading. (Found by a tester of the console.)"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.browser.conftest import THIRD_OWNER, Console, screenshot

UNKNOWN_VM = str(uuid.UUID(int=7))  # a uuid no VM has


def _settled(page: Any, console: Console, role: str, path: str) -> None:
    """Open ``path``, sign in as ``role`` and wait until every fragment it loads has
    answered (the fleet's chart, a VM's object at its version)."""
    page.goto(f"{console.url}{path}")
    page.locator("#login input[name=token]").fill(console.tokens[role])
    page.locator("#login button[type=submit]").click()
    page.wait_for_selector("#session [data-role]")
    page.wait_for_function("""() => {
        const content = document.getElementById("content");
        return (!content.dataset.fragment || content.dataset.status)
            && !document.querySelector("[aria-busy]");
    }""")


def _a_vm_on_the_network(console: Console) -> str:
    """The VM the tests gave an address on a network: its page has the widest rows."""
    return console.get("operator", "/vms", owner_uuid=THIRD_OWNER, limit=1)[0]["uuid"]


@pytest.mark.parametrize("path", [
    "/console", "/console/servers", "/console/audit", "VM", f"/console/vms/{UNKNOWN_VM}",
    "/console/nope"])
def test_no_console_page_scrolls_sideways_in_a_narrow_window(
        browser: Any, console: Console, path: str) -> None:
    # only the fleet was checked: the servers page was 20 px too wide at 420 px
    context = browser.new_context(viewport={"width": 420, "height": 800})
    try:
        page = context.new_page()
        if path == "VM":
            path = f"/console/vms/{_a_vm_on_the_network(console)}"
        _settled(page, console, "operator", path)
        width = page.evaluate("document.documentElement.clientWidth")
        assert page.evaluate("document.documentElement.scrollWidth") <= width, path
        if path == "/console":
            page.get_by_test_id("live").wait_for()  # the header wraps: the counter is seen
            live = page.get_by_test_id("live").bounding_box()
            assert live["x"] >= 0 and live["x"] + live["width"] <= width
            screenshot(page, console, "narrow")
    finally:
        context.close()


def test_a_vms_page_for_a_uuid_no_vm_has_says_not_found_under_a_heading(
        page: Any, console: Console) -> None:
    # it showed "404 ResourceNotFound: VM not found" alone, under no heading
    response = page.goto(f"{console.url}/console/vms/{UNKNOWN_VM}")
    assert response is not None and response.status == 200  # the shell: the same to all
    _settled(page, console, "operator", f"/console/vms/{UNKNOWN_VM}")
    assert page.locator("#content").get_attribute("data-status") == "404"
    assert page.locator("#content h1").inner_text() == "Not found"
    assert page.get_by_test_id("error").inner_text().startswith("404 ResourceNotFound")
    assert page.title() == "Not found · vmledger console"
    # another owner's VM is not found to an owner either, as GET /vms/{uuid} answers
    theirs = console.get("operator", "/vms", owner_uuid=console.owners["owner_b"],
                         state="running", limit=1)[0]["uuid"]
    page.evaluate("sessionStorage.clear()")  # signed out: the next page asks again
    _settled(page, console, "owner_a", f"/console/vms/{theirs}")
    assert page.locator("#content h1").inner_text() == "Not found"
