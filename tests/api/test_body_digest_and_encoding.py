"""What a request says of its body's bytes, checked where every route reads its body
(service/api/bodies.py), before anything is parsed or recorded (api.md, "Contract:
conventions"):

- ``Content-MD5``: as VMAPI's restify body reader, a body whose MD5 (base64) is not the one
  sent is ``400 BadDigest``, "Content-MD5 '<sent>' didn't match '<computed>'". No header, no
  check. A tester's: a wrong digest still created the VM.
- ``Content-Encoding``: only ``identity``; any other is ``415 UnsupportedMediaType`` naming
  it. A tester's: a gzip body was refused as "not valid JSON (not UTF-8 text)", and a plain
  body sent as ``br`` was read as if the header were absent."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json

import pytest

from tests.api.helpers import assert_error, create_running_vm, vm_body

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

JSON = {"content-type": "application/json"}


def md5(content: bytes) -> str:
    return base64.b64encode(hashlib.md5(content, usedforsecurity=False).digest()).decode()


def _requests(client) -> list[tuple[str, str, bytes]]:
    """A request of each way a body is read: a command's, an agent report's, a route's that
    reads none (its body still refused or taken)."""
    vm_uuid = create_running_vm(client)
    return [("POST", "/vms", json.dumps(vm_body()).encode()),
            ("POST", f"/vms/{vm_uuid}?action=stop", b'{"sync": false}'),
            ("PUT", f"/vms/{vm_uuid}", json.dumps({"state": "running"}).encode()),
            ("DELETE", "/sim/faults", b"{}")]


def test_a_body_that_does_not_match_its_content_md5_is_refused_and_changes_nothing(
        client, services) -> None:
    for method, path, content in _requests(client):
        head = services.commands.head_position()
        wrong = md5(content + b" ")
        response = client.request(method, path, content=content,
                                  headers={**JSON, "Content-MD5": wrong})
        body = assert_error(response, 400, "BadDigest")
        assert body["message"] == f"Content-MD5 '{wrong}' didn't match '{md5(content)}'", body
        assert services.commands.head_position() == head, path


def test_a_body_that_matches_its_content_md5_or_sends_none_is_taken(client) -> None:
    content = json.dumps(vm_body()).encode()
    for headers in ({"Content-MD5": md5(content)}, {}):
        response = client.post("/vms", content=content, headers={**JSON, **headers})
        assert response.status_code == 202, response.text


def test_a_content_md5_that_is_no_digest_is_a_mismatch(client) -> None:
    content = json.dumps(vm_body()).encode()
    response = client.post("/vms", content=content,
                           headers={**JSON, "Content-MD5": "not base64 at all" * 20})
    body = assert_error(response, 400, "BadDigest")
    assert len(body["message"]) < 200, body  # what the client sent is cut


@pytest.mark.parametrize("encoding", ["gzip", "br", "deflate", "identity, gzip", "x"])
def test_a_body_sent_with_a_content_encoding_is_refused_naming_it(
        client, services, encoding) -> None:
    for method, path, content in _requests(client):
        head = services.commands.head_position()
        sent = gzip.compress(content) if encoding == "gzip" else content
        response = client.request(method, path, content=sent,
                                  headers={**JSON, "Content-Encoding": encoding})
        body = assert_error(response, 415, "UnsupportedMediaType")
        assert "Content-Encoding" in body["message"] and encoding in body["message"], body
        assert services.commands.head_position() == head, path


def test_identity_is_no_encoding(client) -> None:
    response = client.post("/vms", content=json.dumps(vm_body()).encode(),
                           headers={**JSON, "Content-Encoding": "Identity"})
    assert response.status_code == 202, response.text
