"""An error repeats at most a bounded part of what the client sent, cut with "…" (api.md,
"Contract: errors"). Found by a tester: a 40 KB ``Accept-Version`` was echoed whole in the
400, and a 404 echoed a 5,000-character path id."""

from __future__ import annotations

import pytest

from service.api.errors import MAX_ERRORS, MAX_FIELD, MAX_MESSAGE
from tests.api.helpers import assert_error, vm_body

LONG = "x" * 5000


def test_a_huge_accept_version_is_cut_in_the_refusal(client):
    header = "9" * 40_000
    body = assert_error(client.get("/ping", headers={"Accept-Version": header}), 400,
                        "InvalidVersion")
    assert len(body["message"]) < 300, len(body["message"])
    assert "9" * 100 + "…" in body["message"] and "supported: 1.0.0" in body["message"]


@pytest.mark.parametrize("path", [f"/vms/{LONG}", f"/jobs/{LONG}", f"/servers/{LONG}",
                                  f"/volumes/{LONG}", f"/networks/{LONG}",
                                  f"/vms/{LONG}/history"])
def test_a_long_path_id_is_cut_in_the_404(client, path):
    body = assert_error(client.get(path), 404, "ResourceNotFound")
    assert len(body["message"]) < 200, body["message"][:300]
    if path.startswith("/vms/"):  # VMAPI's "VM not found" repeats no id at all
        assert body["message"] == "VM not found (Invalid UUID: not a uuid)"
    else:
        assert "x" * 100 + "…" in body["message"]


def test_every_refusal_bounds_what_it_repeats(client):
    # an unknown parameter's name, a value VMAPI's words repeat: each bounded in the body
    body = assert_error(client.get(f"/vms?{LONG}=1&create_timestamp={LONG}"), 409,
                        "ValidationFailed")
    for error in body["errors"]:
        assert len(error["field"]) <= MAX_FIELD + 1 and len(error["message"]) <= MAX_MESSAGE + 1
    assert any(error["field"].endswith("…") for error in body["errors"]), body


def test_a_long_idempotency_key_is_cut_in_its_reuse_refusal(client):
    # found by a tester: the 422 repeated all 255 characters of the key
    key = "k" * 255
    first = client.post("/vms", json=vm_body(), headers={"Idempotency-Key": key})
    assert first.status_code == 202, first.text
    body = assert_error(client.post("/vms", json=vm_body(ram=2048),
                                    headers={"Idempotency-Key": key}),
                        422, "IdempotencyKeyReused")
    assert "k" * 100 + "…" in body["message"] and "k" * 101 not in body["message"], body


def test_a_refusal_lists_at_most_max_errors_and_counts_the_rest(client):
    """Found by a tester: 6,000 unknown parameters were answered with 6,000 entries (389 KB)."""
    query = "&".join(f"p{n}=v" for n in range(MAX_ERRORS + 50))
    body = assert_error(client.get(f"/vms?{query}"), 409, "ValidationFailed")
    assert len(body["errors"]) == MAX_ERRORS
    assert body["errors_omitted"] == 50
    few = assert_error(client.get("/vms?p1=v&p2=v"), 409, "ValidationFailed")
    assert len(few["errors"]) == 2 and "errors_omitted" not in few
