"""JSON a client sends outside the body (a ListVms marker in either form, the ``x-context``
header, a changefeed registration) nested past the parser's recursion limit is refused naming
its field, as a body nested too deeply is (tester D, bug 1: ``json.loads`` raised
``RecursionError``, which no ``except ValueError`` caught, and ``GET /vms`` answered 500)."""

from __future__ import annotations

import base64

import pytest

from domain import json_input
from service.changes.triton import RegistrationError, parse_registration
from tests.api.helpers import V2, assert_error, error_fields, vm_body

DEEP = {
    "array 1000": "[" * 1000 + "]" * 1000,
    "array 5000": "[" * 5000 + "]" * 5000,
    "object": '{"a":' * 3000 + "1" + "}" * 3000,
}


def opaque(text: str) -> str:
    """``text`` in the form of our opaque markers (base64url, unpadded)."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
def test_loads_refuses_deep_json_as_a_value_error(text) -> None:
    with pytest.raises(json_input.JsonInputError) as raised:
        json_input.loads(text)
    assert raised.value.too_deep and str(raised.value) == "nested too deeply"


@pytest.mark.parametrize("marker", [*DEEP.values(), *map(opaque, DEEP.values())],
                         ids=[*DEEP, *(f"opaque {k}" for k in DEEP)])
@pytest.mark.parametrize("path", ["/vms", "/console/fragments/fleet"])
def test_a_deep_marker_is_refused_naming_marker(client, marker, path) -> None:
    body = assert_error(client.get(path, params={"marker": marker}), 409, "ValidationFailed")
    assert error_fields(body) == {"marker": "Invalid"}, body
    assert_error(client.get(path, params={"marker": marker}, headers=V2), 422,
                 "ValidationFailed")


def test_a_deep_vmapi_marker_says_why(client) -> None:
    body = client.get("/vms", params={"marker": DEEP["array 1000"]}).json()
    assert body["errors"][0]["message"].endswith("reason: nested too deeply"), body


def test_a_deep_x_context_is_refused_naming_it(client) -> None:
    deep = "[" * 1500 + "]" * 1500  # under the header's 4096 bytes
    body = assert_error(client.post("/vms", json=vm_body(), headers={"x-context": deep}),
                        409, "ValidationFailed")
    assert error_fields(body) == {"x-context": "Invalid"}, body
    assert "nested too deeply" in body["errors"][0]["message"]


def test_an_x_context_that_is_not_json_is_still_kept_as_its_text(client) -> None:
    response = client.post("/vms", json=vm_body(), headers={"x-context": "not json"})
    assert response.status_code == 202, response.text


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
def test_a_deep_changefeed_registration_is_refused(text) -> None:
    with pytest.raises(RegistrationError, match="failed to parse registration payload"):
        parse_registration(text)
