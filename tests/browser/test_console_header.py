"""The console's header and live counter in Chromium: signing out stops the changefeed and
hides the counter; the fleet page counts only changes to the VMs of its owner filter; the
count survives the feed's cuts and failures, resuming after the last position seen and
saying it is reconnecting meanwhile, except after a refusal asking again cannot help; a refused
parameter names its field; a mistyped console link is a page that says so, signed in or not. (A
narrow window: tests/browser/test_console_pages.py. Found by a new user of the console, and a
tester.)"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.browser.conftest import THIRD_OWNER, Console, sign_in


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


def _stream(*positions: int, cut: bool = False) -> str:
    """A changefeed's SSE body (service/changes/sse.py): a change at each position, and the
    service's cut after the last when ``cut``."""
    body = "retry: 1000\n: vmledger changes\n\n" + "".join(
        f'id: {p}\nevent: Stopped\ndata: {{"position": {p}}}\n\n' for p in positions)
    if cut:
        data = json.dumps({"reason": "too far behind", "resume_after": positions[-1]})
        body += f"id: {positions[-1]}\nevent: cut\ndata: {data}\n\n"
    return body


def test_the_live_counter_keeps_its_count_across_cuts_and_failed_resumes(
        page: Any, console: Console) -> None:
    # each resume started the count again at 0, and a resume that failed (the service
    # restarting, or at its stream limit) was never tried again: the count stayed stale
    asked: list[str | None] = []  # each request's after=
    answers = [  # the feed, request by request: a stream cut, refused twice, then followed
        lambda route: route.fulfill(status=200, content_type="text/event-stream",
                                    body=_stream(101, 102, cut=True)),
        lambda route: route.abort("connectionrefused"),
        lambda route: route.fulfill(status=503, content_type="application/json", body=json.dumps(
            {"code": "ServiceUnavailable", "message": "too many change streams"})),
        lambda route: route.fulfill(status=200, content_type="text/event-stream",
                                    body=_stream(103, 104)),
    ]

    def answer(route: Any) -> None:
        asked.append(parse_qs(urlsplit(route.request.url).query).get("after", [None])[0])
        if len(asked) <= len(answers):
            answers[len(asked) - 1](route)
        else:  # from then on the service's own feed, from the page's position: open, quiet
            route.continue_(url=route.request.url.replace(f"after={asked[-1]}",
                                                          f"after={asked[0]}"))

    page.route("**/changes?*", answer)
    count = page.get_by_test_id("live-count")
    with page.expect_request(lambda r: "/changes?" in r.url and "after=104" in r.url):
        sign_in(page, console, "auditor")
        page.locator("[data-testid=live][data-stale]").wait_for()  # the stream ended: resuming
        assert count.inner_text() == "2"
        assert page.get_by_test_id("live-state").is_visible()
        page.locator("[data-testid=live-count]:text-is('4')").wait_for()
    page.locator("[data-testid=live]:not([data-stale])").wait_for()  # following again
    assert page.get_by_test_id("live-state").is_hidden()
    assert count.inner_text() == "4"
    assert asked[:5] == [asked[0], "102", "102", "102", "104"], asked


def _refused(status: int) -> Callable[[Any], None]:
    """An answer of the feed refusing the request with ``status`` (a VMAPI-shaped body)."""
    return lambda route: route.fulfill(status=status, content_type="application/json",
                                       body=json.dumps({"code": "Refused", "message": "no"}))


def _feed_answering(page: Any, *answers: Callable[[Any], None]) -> list[str | None]:
    """Answer the page's feed requests with ``answers`` in turn, then with the service's own
    feed from the page's position (open, quiet); returns each request's after=."""
    asked: list[str | None] = []

    def answer(route: Any) -> None:
        asked.append(parse_qs(urlsplit(route.request.url).query).get("after", [None])[0])
        if len(asked) <= len(answers):
            answers[len(asked) - 1](route)
        else:
            route.continue_(url=route.request.url.replace(f"after={asked[-1]}",
                                                          f"after={asked[0]}"))
    page.route("**/changes?*", answer)
    return asked


def _cut_after_two(route: Any) -> None:
    route.fulfill(status=200, content_type="text/event-stream", body=_stream(101, 102, cut=True))


@pytest.mark.parametrize("status", [400, 404, 422])
def test_a_resume_the_feed_refuses_hides_the_counter_and_is_not_tried_again(
        page: Any, console: Console, status: int) -> None:
    # a refusal other than 401/403 (an ``after`` refused or expired: 400, 404, 422) was tried
    # again every 30 s for good, the counter saying it was reconnecting; asking again cannot
    # help, so the counter is hidden, as for a role the feed refuses
    page.clock.install()  # the resumes' timers run when the test says
    asked = _feed_answering(page, _cut_after_two, _refused(status))
    sign_in(page, console, "auditor")
    page.locator("[data-testid=live][data-stale]").wait_for()  # the stream ended: resuming
    with page.expect_response(lambda r: "/changes?" in r.url and r.status == status):
        page.clock.run_for(1000)  # the first resume, refused
    page.get_by_test_id("live").wait_for(state="hidden")
    page.clock.run_for(10 * 30_000)  # every resume a retry would have made
    assert page.get_by_test_id("live").is_hidden()
    assert asked == [asked[0], "102"], asked


@pytest.mark.parametrize("status", [408, 429, 500])
def test_a_resume_answered_with_a_timeout_too_many_requests_or_a_5xx_is_tried_again(
        page: Any, console: Console, status: int) -> None:
    # 408 and 429 say to ask again later, as a 5xx may: the counter says it is reconnecting
    # and resumes after the last position seen, 2 s later, keeping its count
    page.clock.install()
    asked = _feed_answering(page, _cut_after_two, _refused(status))
    sign_in(page, console, "auditor")
    page.locator("[data-testid=live][data-stale]").wait_for()
    with page.expect_response(lambda r: "/changes?" in r.url and r.status == status):
        page.clock.run_for(1000)
    assert page.locator("[data-testid=live][data-stale]").is_visible()  # still reconnecting
    with page.expect_response(lambda r: "/changes?" in r.url and r.status == 200):
        page.clock.run_for(2000)
    page.locator("[data-testid=live]:not([data-stale])").wait_for()  # following again
    assert page.get_by_test_id("live-count").inner_text() == "2"
    assert asked == [asked[0], "102", "102"], asked


def test_a_refused_parameter_is_named_on_the_page(page: Any, console: Console) -> None:
    # it showed "409 ValidationFailed: Invalid Parameters" and not which one
    sign_in(page, console, "auditor", "/console?server_uuid=not-a-uuid")
    page.wait_for_selector("#content[data-status='409']")
    shown = page.get_by_test_id("error").inner_text()
    assert shown.startswith("409 ValidationFailed: Invalid Parameters")
    assert "server_uuid: Invalid UUID" in shown, shown


def test_a_mistyped_console_link_shows_a_not_found_page_and_signing_in_keeps_it(
        page: Any, console: Console) -> None:
    # found by a tester: /console/nope answered the API's 401 JSON, shown bare
    response = page.goto(f"{console.url}/console/nope")
    assert response is not None and response.status == 404
    message = page.get_by_test_id("error")
    # signed out, the page showed the sign-in form alone: the message is seen beside it
    page.wait_for_selector("#login:not([hidden])")
    assert message.is_visible() and page.locator("#content h1").inner_text() == "Not found"
    assert "No console page at this address" in message.inner_text()
    page.locator("#login input[name=token]").fill(console.tokens["operator"])
    page.locator("#login button[type=submit]").click()
    page.wait_for_selector("#session [data-role]")
    assert page.locator("#login").is_hidden()
    assert "No console page at this address" in message.inner_text()
    assert page.title() == "Not found · vmledger console"
