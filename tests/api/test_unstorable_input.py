"""Input no read model could store or no response could carry is refused with a 4xx and
appends nothing: a NUL character or a lone surrogate in any string or key of a body, of the
``x-context`` header or of the URL, and non-finite numbers (found by a new-user test: one such
request stopped every read model on PostgreSQL, or made a VM's reads answer 500 for good)."""

from __future__ import annotations

import pytest

from tests.api.helpers import assert_error, create_running_vm, create_vm, vm_body

OWNER = "930896af-bf8c-48d4-885c-6573a94b1853"

# Raw JSON text, so that NaN, Infinity and lone surrogates reach the server as a client sends
# them (json.dumps would refuse or escape them differently).
BAD_CREATE_BODIES = {
    "NUL in a tag key": '"tags": {"k\\u0000": "v"}',
    "NUL in a tag value": '"tags": {"k": "v\\u0000"}',
    "NUL in customer_metadata": '"customer_metadata": {"a": "x\\u0000y"}',
    "NUL in an internal_metadata key": '"internal_metadata": {"\\u0000": 1}',
    "lone surrogate in metadata": '"customer_metadata": {"a": "\\ud800"}',
    "lone surrogate in a tag key": '"tags": {"\\udfff": "v"}',
    "NaN in metadata": '"customer_metadata": {"a": NaN}',
    "Infinity in a tag": '"tags": {"a": Infinity}',
    "-Infinity in metadata": '"internal_metadata": {"a": -Infinity}',
}


def post_raw(client, path: str, text: str, **headers: str):
    return client.post(path, content=text.encode(),
                       headers={"content-type": "application/json", **headers})


@pytest.mark.parametrize("fragment", BAD_CREATE_BODIES.values(), ids=BAD_CREATE_BODIES.keys())
def test_a_create_with_an_unstorable_value_is_refused_and_appends_nothing(
    client, services, fragment,
):
    head = services.commands.head_position()
    response = post_raw(client, "/vms", f'{{"owner_uuid": "{OWNER}", "brand": "joyent", '
                                       f'"ram": 256, {fragment}}}')
    body = assert_error(response, 409, "ValidationFailed")
    assert "NUL" in response.text or "Unicode" in response.text or "finite" in response.text
    assert body["errors"]
    assert services.commands.head_position() == head


@pytest.mark.parametrize("fragment", ['{"tags": {"k": "v\\u0000"}}',
                                      '{"customer_metadata": {"a": NaN}}',
                                      '{"context": {"x": ["\\ud800"]}}'])
def test_an_update_with_an_unstorable_value_is_refused_and_appends_nothing(
    client, services, fragment,
):
    vm_uuid = create_running_vm(client)  # its provision job done: nothing else appends
    head = services.commands.head_position()
    response = post_raw(client, f"/vms/{vm_uuid}?action=update", fragment)
    assert_error(response, 409, "ValidationFailed")
    assert services.commands.head_position() == head


def test_an_x_context_header_with_a_nul_is_refused_and_appends_nothing(client, services):
    head = services.commands.head_position()
    response = client.post("/vms", json=vm_body(), headers={"x-context": '{"a": "\\u0000"}'})
    body = assert_error(response, 409, "ValidationFailed")
    assert body["errors"][0]["field"] == "x-context"
    assert services.commands.head_position() == head


@pytest.mark.parametrize("url", ["/vms?alias=%00", "/vms?tag.a=%00", "/vms?tag.%00=x",
                                 "/vms/%00", "/jobs?vm_uuid=%00"])
def test_a_nul_in_the_url_is_refused_before_any_lookup(client, url):
    assert_error(client.get(url), 409, "ValidationFailed")


def test_values_that_can_be_stored_still_are(client):
    vm_uuid = create_vm(client, tags={"k": "ü ✓ 𝄞"}, customer_metadata={"n": 1.5, "b": True})[
        "vm_uuid"]
    vm = client.get(f"/vms/{vm_uuid}").json()
    assert vm["tags"] == {"k": "ü ✓ 𝄞"}
    assert vm["customer_metadata"] == {"n": 1.5, "b": True}
