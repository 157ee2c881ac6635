"""With no projection runner on the database (PostgreSQL and ``vmledger serve`` alone, the
embedded runners off, no ``vmledger project``), commands answer 202 and no read can be
answered. Found by a tester: ``/ping`` answered 200 "OK" with a growing lag, every read a
bare 503, and nothing was logged. Now ``/ping`` answers 503 saying so while the read models
lag, a read's 503 says why, and ``serve`` warns at start (docs/operations.md, "Is a
projection runner running?")."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service import projector_presence
from service.api.app import create_app
from service.append_wakeups import own_connection_params
from service.logs import Throttled
from service.projector_presence import NO_RUNNER, ProjectorPresence, projector_running
from service.storage import PostgresLedgerRecorder
from tests.api.conformance import conforming
from tests.api.helpers import vm_body
from tests.waiting import wait_until


@pytest.fixture
def alone(services) -> Iterator[TestClient]:
    """The API with no runner in its process, reads giving up after 0.2 s."""
    services.settings.read_timeout_s = 0.2
    with conforming(TestClient(create_app(services=services, background=False))) as http:
        yield http


def _runner_elsewhere(services) -> ProjectorPresence:
    """A projection runner's lock, held as another process's runner holds it."""
    recorder = services.app.recorder
    presence = ProjectorPresence(services.settings, own_connection_params(recorder)
                                 if isinstance(recorder, PostgresLedgerRecorder) else None)
    presence.start()
    wait_until(lambda: projector_running(services.settings, services.db), "the runner's lock")
    return presence


def test_ping_answers_503_while_the_read_models_lag_and_no_runner_runs(alone, services):
    services.projections.catch_up()  # the fleet's servers, recorded as the services began
    assert alone.get("/ping").status_code == 200  # nothing lags: nothing to say
    assert alone.post("/vms", json=vm_body()).status_code == 202
    stalled = alone.get("/ping")
    assert stalled.status_code == 503, stalled.text
    assert stalled.headers["Retry-After"]
    body = stalled.json()
    assert body["code"] == "Unavailable"
    assert body["message"].startswith("read models behind the log (")
    assert "vm_view by " in body["message"] and body["message"].endswith(NO_RUNNER)
    # the lag, as a 200 has it (docs/operations.md: /ping always has it; a tester found the
    # 503 without it)
    head = services.projections.head()
    assert (body["backend"], body["head_position"]) == (services.settings.backend, head)
    assert body["projection_lag"] == {name: head - position for name, position
                                      in services.projections.positions().items()}
    assert body["projection_lag"]["vm_view"] > 0 and body["projection_past_head"] == []
    assert body["healthy"] is False and "projections" in body["pingErrors"]

    elsewhere = _runner_elsewhere(services)
    try:  # a runner is there, only behind (or about to catch up): the ping is OK, lag and all
        ping = alone.get("/ping")
        assert ping.status_code == 200, ping.text
        assert ping.json()["status"] == "OK" and ping.json()["projection_lag"]["vm_view"] > 0
    finally:
        elsewhere.stop()
    wait_until(lambda: alone.get("/ping").status_code == 503, "the ping to miss the runner")
    services.projections.catch_up()  # caught up (by a runner since gone): nothing lags
    assert alone.get("/ping").status_code == 200


def test_a_read_that_times_out_with_no_runner_says_why_and_it_is_logged(alone, caplog,
                                                                      monkeypatch):
    # the process's line, at most once a minute: a fresh one, whatever earlier tests logged
    monkeypatch.setattr(projector_presence, "_UNPROJECTED", Throttled(
        projector_presence.log, "a read timed out", interval_s=60.0, level=logging.WARNING))
    vm_uuid = alone.post("/vms", json=vm_body()).json()["vm_uuid"]
    with caplog.at_level(logging.WARNING):
        read = alone.get(f"/vms/{vm_uuid}")
    assert read.status_code == 503
    assert read.json()["message"].startswith("read models did not reach position ")
    assert read.json()["message"].endswith(f"; {NO_RUNNER}")
    assert NO_RUNNER in caplog.text


def test_a_read_that_times_out_with_a_runner_says_nothing_of_runners(alone, services):
    vm_uuid = alone.post("/vms", json=vm_body()).json()["vm_uuid"]
    elsewhere = _runner_elsewhere(services)  # held, but it projects nothing
    try:
        read = alone.get(f"/vms/{vm_uuid}")
    finally:
        elsewhere.stop()
    assert read.status_code == 503 and "projection runner" not in read.json()["message"]


def test_serve_without_embedded_runners_warns_at_start_when_none_runs(services, caplog):
    services.settings.embedded_runners = False
    with caplog.at_level(logging.WARNING), TestClient(create_app(services=services)):
        pass
    [warning] = [r for r in caplog.records if NO_RUNNER in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert "serve runs no projection runner" in warning.getMessage()

    caplog.clear()
    elsewhere = _runner_elsewhere(services)
    try:
        with caplog.at_level(logging.WARNING), TestClient(create_app(services=services)):
            pass
    finally:
        elsewhere.stop()
    assert NO_RUNNER not in caplog.text
