"""A console address that names no page (a mistyped link, a page of a later version) is a
console page that says so, 404, with no token: it had answered 401 with the API's JSON,
which a browser shows bare and which asked for a token that would not have helped."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.helpers import assert_error
from tests.api.test_authorization import bearer
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


def test_the_fragments_stay_behind_the_token(authed: TestClient) -> None:
    # the fragments are the API's: an unknown one is not a page
    assert_error(authed.get("/console/fragments/nope"), 401, "Unauthorized")


@pytest.mark.parametrize("path", [
    "/console/static/nope.js", "/console/static/", "/console/static/a/b.css",
    "/console/static/console.js.map", "/console/static/..%2Fpages.py"])
@pytest.mark.parametrize("headers", [{}, bearer("operator"), {"Authorization": "Bearer no"}])
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_missing_asset_is_404_whatever_the_token(authed: TestClient, path: str,
                                                   headers: dict[str, str]) -> None:
    # a browser sends no token for an asset: a missing one answered 401, "a bearer token is
    # required" (with one, the API's JSON 404), where /console/static/ itself was the 404 page
    response = authed.get(path, headers=headers)
    assert response.status_code == 404, response.text
    assert "<h1>Not found</h1>" in response.text
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert authed.head(path, headers=headers).status_code == 404
