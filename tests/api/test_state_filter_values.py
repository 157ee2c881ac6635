"""A refused ``state`` filter lists every value the filter takes, in VMAPI's words (api.md,
"Reads"): ``GET /vms?state=bogus`` and the console's fleet fragment said "Must be one of:
active, destroyed, running, stopped", though ``provisioning``, ``failed`` and ``quarantined``
are taken too (a tester)."""

from __future__ import annotations

import pytest

from tests.api.helpers import assert_error

EVERY_STATE = ("Must be one of: active, destroyed, failed, provisioning, quarantined, "
               "running, stopped")


@pytest.mark.parametrize("path", ["/vms", "/console/fragments/fleet"])
def test_a_bad_state_is_refused_listing_every_state_taken(client, path) -> None:
    body = assert_error(client.get(path, params={"state": "bogus"}), 409, "ValidationFailed")
    assert body["errors"] == [{"field": "state", "code": "Invalid", "message": EVERY_STATE}]
    for state in EVERY_STATE.removeprefix("Must be one of: ").split(", "):
        assert client.get(path, params={"state": state}).status_code == 200, state
