"""WaitJob (``GET /jobs/{uuid}/wait``) reads again through a failure that passes (a cut
connection, the database out of reach, a pool with no connection to give) until its own
timeout, as a ``sync=true`` command's wait does (api.md, "Reads"); any other failure ends it
at once, and one still there at the timeout is answered as it was. It used to answer its
first failed read's 503, the database back a moment later."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import OperationalError
from fastapi.testclient import TestClient
from psycopg_pool import PoolClosed

from service.api.app import create_app
from service.container import Services
from tests.api.conformance import conforming
from tests.api.helpers import vm_body

TIMEOUT_S = 10  # the waits' own timeout here; none of these tests waits that long

# A cut connection as each layer raises it: the driver's own error, and the library's.
CUTS = {"driver": psycopg.OperationalError, "library": OperationalError}

# Where a wait's read may fail: the check of job_view's position, and the job's row there.
SEAMS = {
    "job_view's position": lambda services: (services.projections, "wait_for"),
    "the job's row": lambda services: (services.jobs, "get"),
}

# Which of those reads fail (counted from 1): finding the job before the wait (its first
# read), or the wait's own checks after it.
FAILING = {"finding the job": {1, 2}, "waiting for it": {2, 3}}


@pytest.fixture
def idle(services: Services) -> Iterator[TestClient]:
    """The API with no background thread: only the request reads what a test makes fail."""
    with conforming(TestClient(create_app(services=services, background=False))) as http:
        yield http


def _ended_job(http: TestClient, services: Services) -> str:
    """The uuid of a provision job that succeeded, shown by ``job_view``."""
    job_uuid = http.post("/vms", json=vm_body()).json()["job_uuid"]
    services.projections.catch_up()
    services.worker.run_pending()
    services.projections.catch_up()
    assert services.jobs.get(job_uuid)["execution"] == "succeeded"
    return job_uuid


def _failing(monkeypatch: pytest.MonkeyPatch, seam: tuple[Any, str],
             fails: Callable[[int], Exception | None]) -> list[int]:
    """Replaces ``seam``'s read by one that raises ``fails(n)`` on its ``n``-th call (from
    1) when that is not None; returns the numbers of the calls that raised."""
    owner, name = seam
    read = getattr(owner, name)
    calls: list[int] = []
    raised: list[int] = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        error = fails(len(calls))
        if error is None:
            return read(*args, **kwargs)
        raised.append(len(calls))
        raise error
    monkeypatch.setattr(owner, name, flaky)
    return raised


@pytest.mark.parametrize("which", FAILING.values(), ids=FAILING.keys())
@pytest.mark.parametrize("where", SEAMS.values(), ids=SEAMS.keys())
@pytest.mark.parametrize("error", CUTS.values(), ids=CUTS.keys())
def test_a_wait_job_through_a_cut_connection_answers_the_ended_job(
        idle, services, monkeypatch, caplog, error, where, which) -> None:
    job_uuid = _ended_job(idle, services)
    raised = _failing(monkeypatch, where(services), lambda n: error(
        "consuming input failed: server closed the connection unexpectedly")
        if n in which else None)
    with caplog.at_level(logging.WARNING, logger="vmledger"):
        answer = idle.get(f"/jobs/{job_uuid}/wait", params={"timeout": TIMEOUT_S})
    assert answer.status_code == 200, answer.text
    assert answer.json()["uuid"] == job_uuid
    assert answer.json()["execution"] == "succeeded"
    assert raised == sorted(which)
    lines = [r.getMessage() for r in caplog.records if "server closed" in r.getMessage()]
    assert len(lines) == 1 and job_uuid in lines[0], lines


# Failures that do not pass by reading again, and how the wait is answered: a closed pool
# (the process stopping), wrapped by the library or as the driver raised it (503 both); a
# table missing (the service makes them at start-up only); a bug (the test client raises it).
LASTING = {
    "a closed pool, wrapped": (lambda: _wrapped(PoolClosed("the pool is closed")), 503),
    "a closed pool": (lambda: PoolClosed("the pool is closed"), 503),
    "a table missing": (lambda: OperationalError("no such table: job_view"), 503),
    "a bug": (lambda: KeyError("execution"), KeyError),
}


def _wrapped(cause: Exception) -> Exception:
    error = OperationalError(str(cause))
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(("make", "answered"), LASTING.values(), ids=LASTING.keys())
def test_a_failure_that_does_not_pass_ends_a_wait_job_at_once(idle, services, monkeypatch,
                                                               make, answered) -> None:
    job_uuid = _ended_job(idle, services)
    raised = _failing(monkeypatch, (services.jobs, "get"), lambda _n: make())
    if isinstance(answered, int):
        answer = idle.get(f"/jobs/{job_uuid}/wait", params={"timeout": TIMEOUT_S})
        assert answer.status_code == answered, answer.text
    else:
        with pytest.raises(answered):
            idle.get(f"/jobs/{job_uuid}/wait", params={"timeout": TIMEOUT_S})
    assert raised == [1], "read again"


@pytest.mark.parametrize("timeout", [0, 1])
def test_a_wait_job_still_failing_at_its_timeout_answers_the_reads_503(
        idle, services, monkeypatch, timeout) -> None:
    job_uuid = _ended_job(idle, services)
    raised = _failing(monkeypatch, (services.jobs, "get"),
                      lambda _n: OperationalError("connection refused"))
    answer = idle.get(f"/jobs/{job_uuid}/wait", params={"timeout": timeout})
    assert answer.status_code == 503, answer.text
    assert answer.json()["code"] == "Unavailable"
    assert "connection refused" in answer.json()["message"]
    assert answer.headers["retry-after"]
    # read again within a timeout that leaves room for a pause (0.05 s to 0.5 s), never
    # past it: with none, the first failure is the answer
    assert (len(raised) > 1) == (timeout > 0), raised
