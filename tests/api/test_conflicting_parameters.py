"""Two query parameters where the one would silently win over the other, and VMAPI has no
such pair, answer one body (api.md, "Contract: errors"): top-level ``ConflictingParameters``,
one ``Invalid`` error naming the parameter refused, the same message in both."""

from __future__ import annotations

import pytest

from tests.api.helpers import V2, create_running_vm


def _conflict(message: str, refused: str) -> dict:
    return {"code": "ConflictingParameters", "message": message,
            "errors": [{"field": refused, "code": "Invalid", "message": message}]}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_each_pair_answers_the_documented_body_in_both_versions(client) -> None:
    vm = create_running_vm(client)
    pairs = [
        (f"/vms/{vm}", {"version": 1, "at": "2030-01-01T00:00:00Z"},
         _conflict("version and at cannot be used together", "at")),
        (f"/console/fragments/vms/{vm}/state", {"version": 1, "at": "2030-01-01T00:00:00Z"},
         _conflict("version and at cannot be used together", "at")),
        ("/jobs", {"task": "update", "name": "stop"},
         _conflict("task and name cannot be used together", "task")),
        (f"/vms/{vm}/jobs", {"task": "update", "name": "stop"},
         _conflict("task and name cannot be used together", "task")),
    ]
    for path, params, body in pairs:
        for headers, status in (({}, 409), (V2, 422)):
            response = client.get(path, params=params, headers=headers)
            assert (response.status_code, response.json()) == (status, body), path


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_console_audit_of_one_vm_refuses_paging(client) -> None:
    """``vm_uuid`` with ``after`` or ``limit``: the paging was silently ignored (console
    tester, bug 5)."""
    vm = create_running_vm(client)
    for paging, refused in (({"after": 0}, "after"), ({"limit": 200}, "after"),
                            ({"limit": 5}, "limit")):
        params = {"vm_uuid": vm, **paging}
        if refused == "after" and "after" not in paging:
            params["after"] = 3
        body = _conflict(f"vm_uuid and {refused} cannot be used together", refused)
        for headers, status in (({}, 409), (V2, 422)):
            response = client.post("/console/fragments/audit", params=params, headers=headers)
            assert (response.status_code, response.json()) == (status, body), params
