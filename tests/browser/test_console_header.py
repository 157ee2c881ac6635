"""The console's header and live counter in Chromium: signing out stops the changefeed and
hides the counter; the fleet page counts only changes to the VMs of its owner filter; a
refused parameter names its field; a narrow window does not scroll sideways. (Found by a
new user of the console.)"""

from __future__ import annotations

import uuid
from typing import Any

from tests.browser.conftest import THIRD_OWNER, Console, screenshot, sign_in


def _create_vm(console: Console, owner_uuid: str) -> str:
    created = console.api("operator", "POST", "/vms", json={
        "owner_uuid": owner_uuid, "brand": "joyent", "ram": 256})
    assert created.status_code == 202, created.text
    return created.json()["vm_uuid"]


def _changes_url(request: Any) -> bool:
    return "/changes?" in request.url


def test_signing_out_stops_the_live_changefeed_and_hides_its_counter(
        page: Any, console: Console) -> None:
    # it kept the feed open with the old token and kept counting after "Sign out"
    with page.expect_request(_changes_url):
        sign_in(page, console, "auditor")
    page.get_by_test_id("live").wait_for()
    with page.expect_event("requestfailed", _changes_url) as aborted:
        page.get_by_test_id("logout").click()
    assert "ABORTED" in aborted.value.failure
    page.wait_for_selector("#login:not([hidden])")
    assert page.get_by_test_id("live").is_hidden()
    assert page.get_by_test_id("live-count").inner_text() == "0"


def test_the_fleets_live_counter_counts_only_the_filtered_owners_changes(
        page: Any, console: Console) -> None:
    owner = str(uuid.uuid4())  # a new owner: its VM's events are all the page may count
    sign_in(page, console, "auditor", f"/console?owner_uuid={owner}")
    page.get_by_test_id("live").wait_for()
    _create_vm(console, THIRD_OWNER)  # another owner's changes come first in the log ...
    mine = _create_vm(console, owner)  # ... so once these are counted, those were passed
    events = len(console.get("auditor", f"/vms/{mine}/history"))
    page.locator(f"[data-testid=live-count]:text-is('{events}')").wait_for()
    # and nothing was counted twice or late: the other owner's VM came before this one's
    assert page.get_by_test_id("live-count").inner_text() == str(events)


def test_a_refused_parameter_is_named_on_the_page(page: Any, console: Console) -> None:
    # it showed "409 ValidationFailed: Invalid Parameters" and not which one
    sign_in(page, console, "auditor", "/console?server_uuid=not-a-uuid")
    page.wait_for_selector("#content[data-status='409']")
    shown = page.get_by_test_id("error").inner_text()
    assert shown.startswith("409 ValidationFailed: Invalid Parameters")
    assert "server_uuid: Invalid UUID" in shown, shown


def test_a_narrow_window_does_not_scroll_sideways(browser: Any, console: Console) -> None:
    # at 420 px the header was 689 px wide and cut the live counter off
    context = browser.new_context(viewport={"width": 420, "height": 800})
    try:
        page = context.new_page()
        sign_in(page, console, "auditor")
        page.get_by_test_id("live").wait_for()
        width = page.evaluate("document.documentElement.clientWidth")
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        live = page.get_by_test_id("live").bounding_box()
        assert live["x"] >= 0 and live["x"] + live["width"] <= width
        screenshot(page, console, "narrow")
    finally:
        context.close()
