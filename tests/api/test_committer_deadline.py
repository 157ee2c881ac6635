"""A request's wait for the committer (group commit, service/commands/committer.py) ends after
the request's database bound (``VMLEDGER_POSTGRES_REQUEST_WAIT_S``), as its own database calls
do: the answer is 503, and an append still queued then is never written; one whose batch was
already being written may commit, and a retry with the same ``Idempotency-Key`` says so."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.container import Services
from service.settings import Settings
from tests.api.conformance import conforming
from tests.api.helpers import vm_body
from tests.builders import create
from tests.service.test_command_tasks import TurnHeld
from tests.service.test_committer import Gate
from tests.waiting import wait_until

BOUND_S = 0.5


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The shared test settings with a short request bound (``services`` builds on them)."""
    return settings.model_copy(update={"postgres_request_wait_s": BOUND_S})


@pytest.fixture
def http(services: Services) -> Iterator[TestClient]:
    with conforming(TestClient(create_app(services=services, background=False))) as client:
        yield client


def streams(services: Services) -> set[str]:
    """Every stream the log holds an event of."""
    return {str(n.originator_id) for n in services.app.recorder.select_notifications(1, 10_000)}




def held(services: Services, gate: Gate) -> threading.Thread:
    """A command (not a request: no bound) whose batch the gate holds in the committer."""
    writer = threading.Thread(target=create, args=(services,))
    writer.start()
    assert gate.entered.wait(10)
    return writer


def test_a_command_queued_behind_a_held_committer_is_answered_503_and_never_appended(
        services, http, monkeypatch):
    gate = Gate(services, monkeypatch)
    writer = held(services, gate)
    vm_uuid = str(uuid.uuid4())
    started = time.monotonic()
    response = http.post("/vms", json=vm_body(uuid=vm_uuid))
    waited = time.monotonic() - started
    assert response.status_code == 503, response.text
    assert response.json()["code"] == "Unavailable" and response.headers["Retry-After"]
    assert BOUND_S <= waited < BOUND_S + 1.5
    gate.open()
    writer.join(10)
    assert not writer.is_alive()
    after = create(services)  # written after whatever was queued with the withdrawn append
    assert after.position == services.commands.head_position()
    assert vm_uuid not in streams(services)


def test_a_command_whose_batch_is_held_is_answered_503_and_a_retry_with_its_key_tells(
        services, http, monkeypatch):
    gate = Gate(services, monkeypatch)
    key = {"Idempotency-Key": "held-create"}
    vm_uuid = str(uuid.uuid4())
    answers: list = []
    request = threading.Thread(target=lambda: answers.append(
        http.post("/vms", json=vm_body(uuid=vm_uuid), headers=key)))
    request.start()
    assert gate.entered.wait(10)  # this request's own batch is being written
    request.join(BOUND_S + 5)
    [response] = answers
    assert response.status_code == 503, response.text
    gate.open()  # the batch goes on and commits: the 503 said the outcome is unknown
    wait_until(lambda: services.commands.committer.batches >= 1, "the committer's transaction",
               timeout=10)
    retry = http.post("/vms", json=vm_body(uuid=vm_uuid), headers=key)
    assert retry.status_code == 202, retry.text
    assert retry.json()["vm_uuid"] == vm_uuid
    assert vm_uuid in streams(services)


def test_a_command_waiting_for_its_vms_turn_past_the_bound_is_withdrawn_and_says_so(
        services, http):
    # Many writers queued on one hot VM: this request's command has started, but the turn is
    # another's for longer than the bound. It is answered 503 naming the wait, and it is
    # never appended, even once the turn is free (the client's retry cannot double it).
    vm_uuid = create(services).vm_uuid
    version = services.commands.load(vm_uuid).version
    held = TurnHeld(services, vm_uuid)
    started = time.monotonic()
    response = http.post(f"/vms/{vm_uuid}", params={"action": "stop"})
    waited = time.monotonic() - started
    held.release()
    assert response.status_code == 503, response.text
    assert response.json()["message"] == (
        f"no answer from the committer in {BOUND_S} s: not appended")
    assert BOUND_S <= waited < BOUND_S + 1.5
    assert create(services).position == services.commands.head_position()  # the loop goes on
    assert services.commands.load(vm_uuid).version == version
