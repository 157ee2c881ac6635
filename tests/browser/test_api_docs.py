"""The API docs page in Chromium: Swagger UI renders every operation of the schema from the
service alone (the ``page`` fixture fails on any request elsewhere), and a call made from the
page with the token given to its "Authorize" button is answered as that token's role."""

from __future__ import annotations

from typing import Any

from tests.browser.conftest import Console, screenshot


def test_the_docs_page_renders_every_operation_offline(page: Any, console: Console) -> None:
    schema = console.get("auditor", "/openapi.json")
    operations = sum(len(methods) for methods in schema["paths"].values())
    page.goto(f"{console.url}/docs")
    page.wait_for_selector(".opblock")
    assert page.locator(".opblock").count() == operations
    screenshot(page, console, "api-docs")


def test_a_call_from_the_docs_page_carries_the_token_given(page: Any,
                                                          console: Console) -> None:
    page.goto(f"{console.url}/docs")
    page.locator("button.authorize").first.click()
    page.locator(".auth-container input").fill(console.tokens["analyst"])
    page.locator(".auth-container button[type=submit]").click()
    page.locator(".modal-ux .close-modal").click()
    # an analyst may read the statistics, and may not read the changefeed's stats: with no token both
    # would be 401
    assert _call(page, "/stats/states") == "200"
    assert _call(page, "/changefeeds/stats") == "403"


def _call(page: Any, path: str) -> str:
    """Open the GET operation of ``path``, try it out and execute it; the status shown."""
    operation = page.locator(f".opblock-get:has([data-path='{path}'])").first
    operation.locator(".opblock-summary").click()
    operation.get_by_role("button", name="Try it out").click()
    operation.get_by_role("button", name="Execute").click()
    status = operation.locator(".live-responses-table tr.response .response-col_status")
    status.wait_for()
    return status.inner_text().strip()
