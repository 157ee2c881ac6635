"""The ``Connection`` header and HEAD answers as VMAPI's restify server sends them
(service/api/connection.py; sdc-vmapi ``vms.curl-head-requests``, Triton ZAPI-220)."""

from __future__ import annotations

import pytest

CURL = {"User-Agent": "curl/7.88.1"}


@pytest.mark.parametrize("path", ["/vms", "/vm"])
@pytest.mark.parametrize("connection", [None, "keep-alive", "close"])
def test_curl_is_answered_connection_close_and_a_head_without_content_length(
        client, path, connection) -> None:
    headers = {**CURL, **({"Connection": connection} if connection else {})}
    response = client.head(path, headers=headers)
    assert response.headers["Connection"] == "close"
    assert "content-length" not in response.headers
    assert "keep-alive" not in response.headers
    assert response.content == b""
    # a GET keeps its length: only HEAD, whose body never comes, loses it
    assert "content-length" in client.get(path, headers=headers).headers


@pytest.mark.parametrize("path", ["/vms", "/vm"])
def test_other_clients_are_told_whether_their_connection_stays_open(client, path) -> None:
    for asked, answered in ((None, "keep-alive"), ("keep-alive", "keep-alive"),
                            ("close", "close")):
        headers = {"User-Agent": "foobar", **({"Connection": asked} if asked else {})}
        response = client.head(path, headers=headers)
        assert response.headers["Connection"] == answered, asked
        assert "content-length" in response.headers, asked
        assert response.content == b""


def test_head_vms_has_the_count_and_no_body(client) -> None:
    response = client.head("/vms", headers=CURL)
    assert response.status_code == 200
    assert response.headers["x-joyent-resource-count"] == "0"
    assert response.content == b""


def test_an_answer_refused_before_any_route_is_told_the_same(client) -> None:
    # a bad Accept-Version is refused by the envelope itself, before any route
    refused = client.get("/vms", headers={"User-Agent": "foobar", "Accept-Version": "nonsense"})
    assert refused.status_code == 400
    assert (refused.headers["Connection"], refused.headers["Keep-Alive"]) == (
        "keep-alive", "timeout=65")
    assert refused.headers["x-request-id"]
    curl = client.head("/vms", headers={**CURL, "Accept-Version": "nonsense"})
    assert curl.headers["Connection"] == "close" and "content-length" not in curl.headers
