"""What every answer's head carries (docs/api.md, "Contract: conventions"): ``x-request-id``,
also on what is served in front of the API's envelope without a token (the schema, the docs
page and its assets, the console's shells, assets and 404 page, their 405), and
``Api-Version`` once the version is negotiated, also on a ``413``. A tester found the
former missing on ``/openapi.json``, ``/docs`` and the console pages, the latter on the 413."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.api.helpers import OWNER, assert_error

FRONT = [("GET", "/openapi.json"), ("HEAD", "/openapi.json"), ("GET", "/docs"),
         ("GET", "/docs/static/swagger-ui.css"), ("GET", "/console"),
         ("GET", "/console/vms/930896af-bf8c-48d4-885c-6573a94b1853"),
         ("GET", "/console/static/console.css"), ("GET", "/console/no-such-page"),
         ("POST", "/docs"), ("DELETE", "/console")]


@pytest.mark.parametrize(("method", "path"), FRONT)
def test_an_answer_served_in_front_of_the_api_carries_a_request_id(
        client: TestClient, method: str, path: str) -> None:
    made = client.request(method, path)
    assert made.status_code in (200, 404, 405), made.text
    assert len(made.headers["x-request-id"]) == 36  # one made for it
    echoed = client.request(method, path, headers={"x-request-id": "trace-front"})
    assert echoed.headers["x-request-id"] == "trace-front"
    assert made.headers.get_list("x-request-id") == [made.headers["x-request-id"]]


def test_a_body_over_the_limit_is_answered_with_the_api_version_that_refused_it(
        client: TestClient, services) -> None:
    limit = services.settings.max_body_bytes
    declared = client.post("/vms", content=b"x" * (limit + 1),
                           headers={"content-type": "application/json", "Accept-Version": "~2"})
    assert_error(declared, 413, "PayloadTooLarge")
    assert declared.headers["api-version"] == "2.0.0"
    assert declared.headers["x-request-id"]

    payload = json.dumps({"owner_uuid": OWNER, "brand": "joyent", "ram": 256,
                          "alias": "x" * (limit + 10)}).encode()
    chunked = client.post("/vms", content=iter([payload]),
                          headers={"content-type": "application/json"})
    assert_error(chunked, 413, "PayloadTooLarge")
    assert chunked.headers["api-version"] == "1.0.0"
