"""``sync=true`` answers after the job ended, or at the wait's bound (api.md, "Commands"),
whatever the read model the wait reads (``job_view``) shows meanwhile; and a failure of the
wait's reads after the command was recorded answers the command's 202, never a read's 503
(api.md, "Commands and the projector"). Found by a tester: with ``job_view`` lagging more than
a quarter of a second (the projector paused, or not running), a sync CreateVm answered 202
after 0.26 s with its job still queued; with the app's role refused ``job_view``, a sync
CreateVm recorded the VM and answered 503, so a client retrying without a key made a second
VM."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import OperationalError
from fastapi.testclient import TestClient
from psycopg_pool import PoolClosed

from service.api import job_waits
from service.api.app import create_app
from service.container import Services
from service.settings import Settings
from tests.api.conformance import conforming
from tests.api.helpers import V2, get_vm, vm_body
from tests.roles import a_role, as_role, run_sql
from tests.waiting import wait_until

BOUND_S = 1.0  # the sync wait's bound in these tests (60 s in service)


@pytest.fixture
def stalled(services: Services) -> Iterator[TestClient]:
    """The API with neither the projection runner nor the job worker running: ``job_view``
    never shows a job accepted meanwhile, until a test starts them."""
    with conforming(TestClient(create_app(services=services, background=False))) as http:
        yield http


def _sync_create(http: TestClient) -> Any:
    return http.post("/vms", params={"sync": "true"}, json=vm_body())


def _sync_delete(http: TestClient) -> Any:
    # a v2 DELETE of a VM whose provision never started cancels it and queues the destroy
    vm_uuid = http.post("/vms", json=vm_body(), headers=V2).json()["vm_uuid"]
    return http.delete(f"/vms/{vm_uuid}", params={"sync": "true"}, headers=V2)


@pytest.mark.parametrize("send", [_sync_create, _sync_delete], ids=["create", "delete"])
def test_a_job_the_read_model_does_not_show_is_waited_for_until_the_bound(
        stalled, services, monkeypatch, send) -> None:
    monkeypatch.setattr(job_waits, "SYNC_TIMEOUT_S", BOUND_S)
    started = time.monotonic()
    answer = send(stalled)
    waited = time.monotonic() - started
    assert answer.status_code == 202, answer.text
    assert waited >= BOUND_S, f"answered after {waited:.2f} s, before the job ended"
    services.projections.catch_up()
    assert services.jobs.get(answer.json()["job_uuid"])["execution"] == "queued"


def test_a_job_the_read_model_shows_late_is_answered_once_it_ended(stalled, services,
                                                                  monkeypatch) -> None:
    reads: list[str | None] = []
    read = services.jobs.get

    def counted(job_uuid: str) -> Any:
        found = read(job_uuid)
        reads.append(None if found is None else found["execution"])
        return found

    monkeypatch.setattr(services.jobs, "get", counted)
    answers: list[Any] = []
    waiting = threading.Thread(target=lambda: answers.append(_sync_create(stalled)))
    waiting.start()
    wait_until(lambda: reads.count(None) >= 3 or answers, "the sync wait to read job_view")
    assert not answers, f"answered while its job was not visible: {answers[0].text}"
    services.start_background(projections=True, worker=True)
    waiting.join(timeout=30)
    assert answers, "no answer"
    answer = answers[0]
    assert answer.status_code == 202, answer.text
    assert reads[-1] == "succeeded"
    vm = get_vm(stalled, answer.json()["vm_uuid"])
    assert vm["state"] == "running"
    assert answer.headers["etag"] == f'"{vm["version"]}"'


def _failing(error: Exception):
    def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise error
    return fail


# Where a sync wait's read may fail, once the command was recorded: the check of job_view's
# position, the read of the job there, and the fold of the VM for its answer's ETag.
FAILING_READS = {
    "job_view's position": lambda services: (services.projections, "wait_for"),
    "the job's row": lambda services: (services.jobs, "get"),
    "the VM's fold": lambda services: (services.commands, "load"),
}


@pytest.mark.parametrize("where", FAILING_READS.values(), ids=FAILING_READS.keys())
def test_a_sync_wait_whose_read_fails_answers_the_commands_202(
        stalled, services, monkeypatch, caplog, where) -> None:
    monkeypatch.setattr(job_waits, "SYNC_TIMEOUT_S", 0.2)
    monkeypatch.setattr(*where(services), _failing(OperationalError("injected: no answer")))
    head = services.commands.head_position()
    with caplog.at_level(logging.WARNING, logger="vmledger"):
        answer = _sync_create(stalled)
    assert answer.status_code == 202, answer.text
    _assert_accepted(answer, services, head)
    lines = [r for r in caplog.records if "injected: no answer" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert answer.json()["job_uuid"] in lines[0].getMessage()
    assert not lines[0].exc_info, "a database's failure is no bug: no traceback"


def test_a_sync_wait_that_meets_a_bug_still_answers_the_commands_202(
        stalled, services, monkeypatch, caplog) -> None:
    monkeypatch.setattr(services.jobs, "get", _failing(KeyError("execution")))
    head = services.commands.head_position()
    with caplog.at_level(logging.WARNING, logger="vmledger"):
        answer = _sync_create(stalled)
    assert answer.status_code == 202, answer.text
    _assert_accepted(answer, services, head)
    bugs = [r for r in caplog.records if r.levelno == logging.ERROR and r.exc_info]
    assert len(bugs) == 1, [r.getMessage() for r in caplog.records]


# A cut connection as each layer raises it: the driver's own error (a tester's
# ``pg_terminate_backend``: "consuming input failed: server closed the connection
# unexpectedly"), and the library's that wraps it.
CUTS = {"driver": psycopg.OperationalError, "library": OperationalError}


def _failing_first(read: Any, times: int, error: type[Exception],
                   after: Any = lambda: True) -> Any:
    """``read``, whose first ``times`` calls once ``after()`` holds raise ``error``."""
    failed: list[int] = []

    def cut(*args: Any, **kwargs: Any) -> Any:
        if after() and len(failed) < times:
            failed.append(1)
            raise error("consuming input failed: server closed the connection unexpectedly")
        return read(*args, **kwargs)
    return cut


@pytest.mark.parametrize("error", CUTS.values(), ids=CUTS.keys())
def test_a_sync_wait_through_a_cut_connection_answers_the_jobs_failure(
        client, services, monkeypatch, caplog, error) -> None:
    """The tester's case: a sync stop's wait lost its connection once, answered 202, and its
    job ended failed; the wait reads again until its bound, so the answer is the 409."""
    monkeypatch.setattr(services.jobs, "get", _failing_first(services.jobs.get, 2, error))
    with caplog.at_level(logging.WARNING, logger="vmledger"):
        answer = client.post("/vms", params={"sync": "true"}, json=vm_body(
            internal_metadata={"force_provision_failure": True}))
    assert answer.status_code == 409, answer.text
    assert answer.json()["code"] == "JobFailed", answer.text
    lines = [r for r in caplog.records if "server closed" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert answer.json()["job_uuid"] in lines[0].getMessage()


@pytest.mark.parametrize("error", CUTS.values(), ids=CUTS.keys())
def test_a_sync_wait_through_a_cut_connection_answers_the_vms_version_now(
        client, services, monkeypatch, error) -> None:
    """The fold of the VM for the answer's ETag, once the job was read ended, is read again
    through a cut connection too: the ETag is the VM's version when it answers (api.md)."""
    ended: list[str] = []
    read_job = services.jobs.get

    def job(*args: Any) -> Any:
        found = read_job(*args)
        if found is not None and found["execution"] == "succeeded":
            ended.append(found["uuid"])
        return found

    monkeypatch.setattr(services.jobs, "get", job)
    monkeypatch.setattr(services.commands, "load", _failing_first(
        services.commands.load, 2, error, after=lambda: bool(ended)))
    answer = client.post("/vms", params={"sync": "true"}, json=vm_body())
    assert answer.status_code == 202, answer.text
    vm = get_vm(client, answer.json()["vm_uuid"])
    assert vm["state"] == "running"
    assert answer.headers["etag"] == f'"{vm["version"]}"'


def test_a_sync_wait_whose_pool_was_closed_answers_at_once(stalled, services,
                                                            monkeypatch) -> None:
    """A closed pool (the process stopping) is no cut that passes: the wait is not drawn
    out to its bound, whose end the process's shutdown would wait for."""
    monkeypatch.setattr(services.jobs, "get", _failing(PoolClosed("the pool is closed")))
    started = time.monotonic()
    answer = _sync_create(stalled)
    assert answer.status_code == 202, answer.text
    assert time.monotonic() - started < job_waits.SYNC_TIMEOUT_S / 2


def _assert_accepted(answer: Any, services: Services, head: int) -> None:
    """``answer`` is the command's 202 as recorded: its VM, job and headers."""
    body = answer.json()
    assert set(body) == {"vm_uuid", "job_uuid"}, body
    assert answer.headers["location"] == f"/vms/{body['vm_uuid']}"
    assert answer.headers["workflow-api"]
    assert answer.headers["etag"].strip('"').isdigit()
    position = int(answer.headers["x-log-position"])
    assert head < position <= services.commands.head_position()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_role_refused_job_view_gets_the_sync_creates_202_and_one_vm(
        services, database_url, caplog) -> None:
    """The tester's case: the app's role lost SELECT on ``job_view`` (PostgreSQL only:
    SQLite has no roles)."""
    services.projections.catch_up()
    with a_role(database_url, "app") as role:
        run_sql(database_url,
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
                f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}",
                f"REVOKE SELECT ON job_view FROM {role}")
        as_app = Services.build(Settings(database_url=as_role(database_url, role)),
                                register_fleet=False)
        try:
            with TestClient(create_app(services=as_app, background=False),
                            raise_server_exceptions=False) as http, \
                    caplog.at_level(logging.WARNING, logger="vmledger"):
                head = services.commands.head_position()
                answer = _sync_create(http)
                assert answer.status_code == 202, answer.text
                _assert_accepted(answer, services, head)
        finally:
            as_app.close()
    lines = [r for r in caplog.records if "job_view" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    services.projections.catch_up()
    assert services.vms.get(answer.json()["vm_uuid"]) is not None
