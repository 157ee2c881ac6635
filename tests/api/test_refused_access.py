"""A database that refuses the service's role what a request asks, because of how it was set
up (a privilege revoked or never granted, a database that takes no writes), answers 503
``Unavailable`` as JSON naming the refusal and the role, with ``Retry-After``; the log says so
once per interval, without a traceback (``service.access_errors``). Operator tester: after a
rebuild left the app's role without SELECT on ``job_view``, ``GET /jobs`` answered a
plain-text 500 "Internal Server Error" and logged two ERROR tracebacks. PostgreSQL only:
SQLite has no roles."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.api import errors
from service.api.app import create_app
from service.container import Services
from service.settings import Settings
from tests.api.helpers import vm_body
from tests.roles import a_role, as_role, run_sql

pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


@pytest.fixture
def app_role(services: Services, database_url: str) -> Iterator[str]:
    """The app's role of docs/operations.md ("Database privileges"), over the tables the
    ``services`` fixture's (the owner's) made and caught up."""
    services.projections.catch_up()
    with a_role(database_url, "app") as role:
        run_sql(database_url,
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
                f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}")
        yield role


@pytest.fixture
def http(database_url: str, app_role: str) -> Iterator[TestClient]:
    """The API as the app's role, with no background runner or worker (they would meet the
    refusal too, and log it)."""
    services = Services.build(Settings(database_url=as_role(database_url, app_role)),
                              register_fleet=False)
    try:
        with TestClient(create_app(services=services, background=False),
                        raise_server_exceptions=False) as client:
            yield client
    finally:
        services.close()


def _assert_refused(response, *named: str) -> str:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["retry-after"]
    body = response.json()
    assert body["code"] == "Unavailable"
    for each in named:
        assert each in body["message"], body["message"]
    return body["message"]


def test_a_read_of_a_table_the_role_may_not_read_is_503_naming_table_and_role(
        http, database_url, app_role, caplog, monkeypatch):
    assert http.get("/jobs").status_code == 200
    monkeypatch.setattr(errors, "_refusal_logged", errors.refusal_logger())
    run_sql(database_url, f"REVOKE SELECT ON job_view FROM {app_role}")
    with caplog.at_level(logging.WARNING, logger="vmledger"):
        for _ in range(5):
            message = _assert_refused(http.get("/jobs"), "table job_view", f'"{app_role}"')
    assert message.startswith(f'the database refused access to table job_view for role '
                              f'"{app_role}"'), message
    lines = [r for r in caplog.records if "refused access" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert not any(r.exc_info for r in caplog.records), "a traceback was logged"


def test_a_write_the_role_may_not_make_is_503_naming_the_table(
        http, services, database_url, app_role):
    events = services.app.recorder.events_table_name
    run_sql(database_url, f"REVOKE INSERT ON {events} FROM {app_role}")
    _assert_refused(http.post("/vms", json=vm_body()), f"table {events}", f'"{app_role}"')


def test_ping_names_the_refusal_as_the_other_routes_do(http, database_url, app_role):
    run_sql(database_url, f"REVOKE SELECT ON projection_tracking FROM {app_role}")
    _assert_refused(http.get("/ping"), "table projection_tracking", f'"{app_role}"')


@pytest.mark.parametrize("table", ["job_view", "vm_view_tags"])
def test_ping_is_503_naming_a_read_model_the_role_may_not_read(http, database_url, app_role,
                                                               table):
    # a tester: with SELECT on job_view revoked, /ping answered 200 healthy while every
    # GET /jobs was 503 (docs/operations.md: such a refusal is 503 on /ping too)
    assert http.get("/ping").status_code == 200
    run_sql(database_url, f"REVOKE SELECT ON {table} FROM {app_role}")
    ping = http.get("/ping")
    message = _assert_refused(ping, f"table {table}", f'"{app_role}"')
    if table == "job_view":  # said as the read it stands for says it
        assert message == _assert_refused(http.get("/jobs"), f'"{app_role}"')
    assert ping.json()["healthy"] is False and ping.json()["pingErrors"] == {
        "database": message}
    run_sql(database_url, f"GRANT SELECT ON {table} TO {app_role}")
    assert http.get("/ping").status_code == 200


def test_a_database_that_takes_no_writes_is_503_saying_so(http, database_url, app_role):
    # as a standby, or default_transaction_read_only set for the role: on connections made
    # from now on, so the pool's are made again
    run_sql(database_url, f"ALTER ROLE {app_role} SET default_transaction_read_only = on",
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = "
            f"'{app_role}'")
    pool = Settings()
    for _connection in range(pool.postgres_pool_size + pool.postgres_max_overflow + 1):
        response = http.post("/vms", json=vm_body())  # each a connection cut above, dropped
        if response.status_code != 503 or "refused" in response.json()["message"]:
            break
    _assert_refused(response, "read-only", f'"{app_role}"')
