"""A console address that names no page (a mistyped link, a page of a later version) is a
console page that says so, 404, with no token: it had answered 401 with the API's JSON,
which a browser shows bare and which asked for a token that would not have helped."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.helpers import assert_error
from tests.api.test_console import authed  # noqa: F401 (a fixture: tokens configured)


@pytest.mark.parametrize("path", [
    "/console/nope", "/console/vms/a/b", "/console/vms/%3Cb%3Ex%22%3E", "/console/servers//",
    "/console/audit/x", "/console/vms/garbage"])
def test_an_address_that_names_no_console_page_is_a_404_page_without_a_token(
        authed: TestClient, path: str) -> None:
    response = authed.get(path)
    assert response.status_code == 404, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert "<h1>Not found</h1>" in response.text
    assert "No console page at this address" in response.text
    assert "data-fragment" not in response.text  # nothing for its script to fetch
    assert "<b>" not in response.text  # the address is not echoed as markup
    head = authed.head(path)
    assert head.status_code == 404 and head.content == b""


def test_the_apis_own_console_paths_stay_behind_the_token(authed: TestClient) -> None:
    # fragments and assets are the API's: an unknown one is not a page
    assert_error(authed.get("/console/fragments/nope"), 401, "Unauthorized")
    assert_error(authed.get("/console/static/missing.js"), 401, "Unauthorized")
