"""CreateVm, the lifecycle actions and DeleteVm are async routes: each hands its command to the
committer's thread and awaits it, with no thread-pool hop (service/api/deps.py, ``command``;
issue #15, "a lean HTTP edge"); what waits for a read model still runs in the thread pool."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from service.container import Services
from tests.api.helpers import vm_body


@pytest.fixture
def threads_of(paused, monkeypatch) -> dict[str, list[str]]:
    """The thread each ``Commands`` call of the routes ran on, by command."""
    commands = paused.services.commands
    seen: dict[str, list[str]] = {}
    for name in ("create_vm", "request_action"):
        real = getattr(commands, name)

        def recorded(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            seen.setdefault(_name, []).append(threading.current_thread().name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(commands, name, recorded)
    return seen


def test_create_actions_and_delete_run_on_the_committers_thread(paused, threads_of):
    http = paused.http
    created = http.post("/vms", json=vm_body())
    assert created.status_code == 202, created.text
    vm_uuid = created.json()["vm_uuid"]
    paused.run_jobs()
    for action in ("stop", "start", "reboot"):
        answer = http.post(f"/vms/{vm_uuid}", params={"action": action})
        assert answer.status_code == 202, answer.text
    assert http.delete(f"/vms/{vm_uuid}").status_code == 202
    assert threads_of == {"create_vm": ["vmledger-committer"],
                          "request_action": ["vmledger-committer"] * 4}


def test_a_refusal_from_the_committers_thread_is_the_usual_answer(paused, threads_of):
    missing = "3f4b5c7e-1d2a-4b8c-9e0f-123456789abc"
    answer = paused.http.post(f"/vms/{missing}", params={"action": "stop"})
    assert answer.status_code == 404 and answer.json()["code"] == "ResourceNotFound"
    assert threads_of == {"request_action": ["vmledger-committer"]}


def test_a_sync_create_answers_once_its_job_has_succeeded(paused, threads_of):
    services: Services = paused.services
    services.start_background(projections=False, worker=True)
    answer = paused.http.post("/vms", params={"sync": "true"}, json=vm_body())
    assert answer.status_code == 202, answer.text
    job = services.jobs.get(answer.json()["job_uuid"])
    assert job is not None and job["execution"] == "succeeded"
    assert threads_of == {"create_vm": ["vmledger-committer"]}
