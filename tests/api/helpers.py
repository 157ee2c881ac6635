"""Small builders for the API tests: create VMs, wait for jobs, read the event log."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from httpx import Response

from service.container import Services

OWNER = "930896af-bf8c-48d4-885c-6573a94b1853"
OTHER_OWNER = "6c8a8f2e-1a8d-4b9e-9a51-1b6b6e3a0c11"
V1 = {"Accept-Version": "~1"}
V2 = {"Accept-Version": "~2"}
TERMINAL = {"succeeded", "failed", "canceled"}

def vm_body(**overrides: Any) -> dict[str, Any]:
    """A valid CreateVm body (256 MiB, owner ``OWNER``) with ``overrides``."""
    return {"owner_uuid": OWNER, "brand": "joyent", "ram": 256, **overrides}


def create_vm(client: TestClient, *, headers: dict[str, str] | None = None,
              **overrides: Any) -> dict[str, str]:
    """POST /vms; asserts 202 and returns ``{vm_uuid, job_uuid}``."""
    response = client.post("/vms", json=vm_body(**overrides), headers=headers)
    assert response.status_code == 202, response.text
    return response.json()


def wait_job(client: TestClient, job_uuid: str) -> dict[str, Any]:
    """GET /jobs/{uuid}/wait?timeout=10; asserts the job ended and returns it."""
    response = client.get(f"/jobs/{job_uuid}/wait", params={"timeout": 10})
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["execution"] in TERMINAL, job
    return job


def create_running_vm(client: TestClient, **overrides: Any) -> str:
    """Create a VM and wait for its provision to succeed; returns its uuid."""
    created = create_vm(client, **overrides)
    assert wait_job(client, created["job_uuid"])["execution"] == "succeeded"
    return created["vm_uuid"]


def act(client: TestClient, vm_uuid: str, action: str, *,
        headers: dict[str, str] | None = None, json: Any = None, **params: Any) -> Response:
    """POST /vms/{uuid}?action=...; returns the response."""
    return client.post(f"/vms/{vm_uuid}", params={"action": action, **params},
                       headers=headers, json=json)


def act_and_wait(client: TestClient, vm_uuid: str, action: str, **kwargs: Any) -> dict[str, Any]:
    """Run ``action`` on the VM; asserts 202 and returns its job once it has ended."""
    response = act(client, vm_uuid, action, **kwargs)
    assert response.status_code == 202, response.text
    return wait_job(client, response.json()["job_uuid"])


def get_vm(client: TestClient, vm_uuid: str, **params: Any) -> dict[str, Any]:
    """GET /vms/{uuid}; asserts 200 and returns the VM object."""
    response = client.get(f"/vms/{vm_uuid}", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def event_types_after(services: Services, position: int) -> list[str]:
    """The types of the events appended to the log after ``position``, in log order."""
    notifications = services.app.recorder.select_notifications(
        position, 10_000, inclusive_of_start=False)
    return [type(services.app.mapper.to_domain_event(n)).__name__ for n in notifications]


def history_types(client: TestClient, vm_uuid: str) -> list[str]:
    """The types of the VM's events, oldest first (GET /vms/{uuid}/history)."""
    response = client.get(f"/vms/{vm_uuid}/history")
    assert response.status_code == 200, response.text
    return [event["type"] for event in response.json()]


def sim_row(services: Services, vm_uuid: str) -> dict[str, Any] | None:
    """The simulated fleet's row for the VM (None: no compute node has it)."""
    with services.db.transaction(commit=False) as tx:
        tx.execute("SELECT * FROM sim_vms WHERE vm_uuid = ?", (vm_uuid,))
        return tx.fetchone()


def assert_error(response: Response, status: int, code: str) -> dict[str, Any]:
    """Assert a VMAPI error body ``{code, message, ...}`` with ``status``; returns the body."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    return body


def error_fields(body: dict[str, Any]) -> dict[str, str]:
    """``{field: code}`` of a validation error's ``errors`` array."""
    return {item["field"]: item["code"] for item in body["errors"]}
