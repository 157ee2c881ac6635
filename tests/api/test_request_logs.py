"""Request logs (docs/operations.md, "Logs"): every line logged while a request is handled
carries its request id and actor, the VM and job it handled once known, and the request ends
with one line of its own (``vmledger.access``)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.container import Services
from tests.api.helpers import OWNER, vm_body

TOKEN = "log-test-owner-token"
OWNER_HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def http(services: Services) -> Iterator[TestClient]:
    """The API with one owner token, ``log-owner``, and its worker running."""
    entry = {"name": "log-owner", "role": "owner", "owner_uuid": OWNER,
             "sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}
    settings = services.settings.model_copy(update={"tokens": json.dumps([entry])})
    with TestClient(create_app(settings, services=services, background=True)) as client:
        yield client


def test_a_command_logs_its_request_id_actor_vm_and_job_on_every_line(
    http, services, json_logs, monkeypatch
) -> None:
    create_vm = services.commands.create_vm

    def create_vm_logging(*args, **kwargs):
        # A line logged by code the route calls, in the thread the route runs in.
        logging.getLogger("test.inside").info("creating the VM")
        return create_vm(*args, **kwargs)

    monkeypatch.setattr(services.commands, "create_vm", create_vm_logging)
    response = http.post("/vms", json=vm_body(),
                         headers={**OWNER_HEADERS, "x-request-id": "req-logs-1"})
    assert response.status_code == 202
    created = response.json()
    waited = http.get(f"/jobs/{created['job_uuid']}/wait", params={"timeout": 10},
                      headers=OWNER_HEADERS)
    assert waited.json()["execution"] == "succeeded"
    lines = json_logs()

    [inside] = [line for line in lines if line["logger"] == "test.inside"]
    assert (inside["request_id"], inside["actor"], inside["level"]) == (
        "req-logs-1", "log-owner", "INFO")
    [closing] = [line for line in lines
                 if line["logger"] == "vmledger.access" and line["request_id"] == "req-logs-1"]
    assert closing["actor"] == "log-owner"
    assert (closing["vm_uuid"], closing["job_uuid"]) == (created["vm_uuid"],
                                                         created["job_uuid"])
    assert (closing["method"], closing["route"], closing["status"]) == ("POST", "/vms", 202)
    assert closing["message"] == "POST /vms 202" and closing["duration_ms"] >= 0
    assert closing["time"].endswith("Z")
    # The worker ran the provision in its own thread: its lines carry the job, not the
    # request's id or actor.
    worker_lines = [line for line in lines if line["logger"] == "vmledger.service.jobs.worker"
                    and line.get("job_uuid") == created["job_uuid"]]
    assert worker_lines
    for line in worker_lines:
        assert "request_id" not in line and line["actor"].startswith("worker:")


def test_a_request_for_a_vm_logs_the_vm_of_its_path_and_its_status(http, json_logs) -> None:
    vm_uuid = "3d1b9c1c-7d55-4a8e-b2a8-0a4e5f1d2c3b"
    assert http.get(f"/vms/{vm_uuid}", headers=OWNER_HEADERS).status_code == 404
    [closing] = [line for line in json_logs() if line["logger"] == "vmledger.access"]
    assert closing["vm_uuid"] == vm_uuid and "job_uuid" not in closing
    assert (closing["route"], closing["status"], closing["actor"]) == (
        "/vms/{vm_uuid}", 404, "log-owner")
    assert closing["request_id"]  # generated when the request brings none


def test_a_request_with_no_valid_token_is_logged_with_no_actor(http, json_logs) -> None:
    response = http.get("/vms", headers={"x-request-id": "req-anon"})
    assert response.status_code == 401
    [closing] = [line for line in json_logs() if line["logger"] == "vmledger.access"]
    assert closing["request_id"] == "req-anon" and closing["status"] == 401
    assert "actor" not in closing


def test_generated_request_ids_are_distinct_version_4_uuids_in_their_usual_text():
    import uuid

    from service.api.headers import new_request_id

    ids = [new_request_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == text
