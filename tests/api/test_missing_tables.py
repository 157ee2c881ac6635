"""A database that is not what the service built (dropped and made again under a running
``serve``, a table dropped by hand) answers 503 ``Unavailable`` as JSON with ``Retry-After``,
not a plain-text 500 (tester B, B11: "a 5xx other than 503 is always a bug"); the log says so
once per interval, with no traceback per request."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from service.api import errors
from service.api.app import create_app
from tests.api.helpers import vm_body


def _drop(services, table: str) -> None:
    with services.db.transaction() as tx:
        tx.execute(f"DROP TABLE {table}")


def _events_table(services) -> str:
    return services.app.recorder.events_table_name


@pytest.fixture
def http(services):
    # No background runner or worker: they would meet the missing table too, and log it.
    # Caught up first, so a read has nothing to wait for.
    services.projections.catch_up()
    app = create_app(services=services, background=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def _assert_unavailable(response, table: str | None = None) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"]
    body = response.json()
    assert body["code"] == "Unavailable"
    assert "not as this service built it" in body["message"]
    if table is not None:  # named on both backends (operator tester: SQLite's was not)
        assert table in body["message"], body["message"]


@pytest.mark.parametrize("table", ["vm_view", "events"])
def test_a_missing_table_answers_503_json_to_reads_and_commands(http, services, table):
    dropped = _events_table(services) if table == "events" else table
    _drop(services, dropped)
    if table == "vm_view":
        _assert_unavailable(http.get("/vms"), dropped)
    else:
        _assert_unavailable(http.post("/vms", json=vm_body()), dropped)


def test_ping_names_a_missing_table_as_the_other_routes_do(http, services):
    """Found by an operator tester: with the database dropped and made again, every route
    named the missing table, but /ping, which an operator reads first, said only
    ``database unreachable: ProgrammingError``."""
    dropped = _events_table(services)
    _drop(services, dropped)
    response = http.get("/ping")
    _assert_unavailable(response, dropped)
    # VMAPI's fields too (lib/endpoints/ping.js): a health check written for it reads them
    body = response.json()
    assert body["healthy"] is False
    assert body["pingErrors"] == {"database": body["message"]}


def test_a_missing_table_is_logged_once_per_interval_without_a_traceback(
        http, services, caplog, monkeypatch):
    monkeypatch.setattr(errors, "_schema_missing_logged", errors.schema_missing_logger())
    _drop(services, "vm_view")
    with caplog.at_level(logging.WARNING, logger="vmledger"):
        for _ in range(5):
            _assert_unavailable(http.get("/vms"))
    lines = [r for r in caplog.records if "not as this service built it" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert lines[0].exc_info is None
    assert not any(r.exc_info for r in caplog.records if r.levelno >= logging.ERROR)
