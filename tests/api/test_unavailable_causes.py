"""A database outage said to a client by its cause, not its exception's class (operator
tester: ``/ping`` said ``database unreachable: OperationalError`` while the log said ``FATAL:
database "t4_a" is not currently accepting connections``): ``/ping``'s message and
``pingErrors``, and every route's 503 (service/api/errors.py), in one line, bounded, never a
password nor a URL's credentials. tests/integration/test_ping_refused.py makes a real
PostgreSQL refuse; tests/service/test_database_causes.py covers the words themselves."""

from __future__ import annotations

import psycopg
import pytest
from eventsourcing.persistence import InterfaceError, OperationalError
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.api import error_handlers
from service.database_failures import CAUSE_LIMIT
from tests.api.helpers import assert_error

FATAL = ('connection failed: connection to server at "10.0.0.5", port 5432 failed: FATAL:  '
         'database "t4_a" is not currently accepting connections\n')
SAID = ('connection failed: connection to server at "10.0.0.5", port 5432 failed: FATAL: '
        'database "t4_a" is not currently accepting connections')
WITH_CREDENTIALS = ('could not connect with "postgresql://app:Sw0rdf1sh@10.0.0.5:5432/t4_a"'
                    "\nhost=10.0.0.5 password=Sw0rdf1sh")


def _lost(said: str, wrapper: type[Exception] = OperationalError) -> Exception:
    """The event store's error for a driver's ``said``, the driver's error its cause."""
    error = wrapper(said)
    error.__cause__ = psycopg.OperationalError(said)
    return error


def _refuse_the_probe(monkeypatch, services, said: str) -> None:
    def lost() -> int:
        raise _lost(said)

    monkeypatch.setattr(services.projections, "head", lost)


def test_ping_in_an_outage_says_the_drivers_cause_in_one_line(client, services,
                                                               monkeypatch) -> None:
    _refuse_the_probe(monkeypatch, services, FATAL)
    response = client.get("/ping")
    body = assert_error(response, 503, "Unavailable")
    assert body["message"] == f"database unreachable: {SAID}"
    assert body["pingErrors"] == {"database": body["message"]}
    assert response.headers["retry-after"]


def test_ping_never_says_a_password_nor_a_urls_credentials(client, services,
                                                           monkeypatch) -> None:
    _refuse_the_probe(monkeypatch, services, WITH_CREDENTIALS)
    response = client.get("/ping")
    assert_error(response, 503, "Unavailable")
    assert "Sw0rdf1sh" not in response.text and "app:" not in response.text
    assert response.json()["message"] == (
        'database unreachable: could not connect with "postgresql://***@10.0.0.5:5432/t4_a"')


def test_ping_bounds_the_cause(client, services, monkeypatch) -> None:
    _refuse_the_probe(monkeypatch, services, "FATAL: " + "x" * 10_000)
    message = assert_error(client.get("/ping"), 503, "Unavailable")["message"]
    assert len(message) == len("database unreachable: ") + CAUSE_LIMIT


@pytest.fixture
def raising() -> TestClient:
    """A bare app with the service's error handlers, whose one route raises what it is
    given (any route's read or write meeting a lost database)."""
    app = FastAPI()
    error_handlers.install(app)
    raised: list[Exception] = []

    @app.get("/raise")
    def raise_() -> None:
        raise raised[0]

    http = TestClient(app, raise_server_exceptions=False)
    http.raised = raised  # type: ignore[attr-defined]
    return http


@pytest.mark.parametrize("wrapper", [OperationalError, InterfaceError])
def test_a_routes_503_for_a_lost_database_says_its_cause(raising, wrapper) -> None:
    raising.raised.append(_lost(FATAL, wrapper))
    body = assert_error(raising.get("/raise"), 503, "Unavailable")
    assert body["message"] == f"the database is unavailable: {SAID}"


def test_a_routes_503_never_says_a_password_nor_a_urls_credentials(raising) -> None:
    raising.raised.append(_lost(WITH_CREDENTIALS))
    response = raising.get("/raise")
    assert_error(response, 503, "Unavailable")
    assert "Sw0rdf1sh" not in response.text and "app:" not in response.text


@pytest.mark.parametrize("error", [
    psycopg.OperationalError(FATAL),
    psycopg.InterfaceError("the connection is lost"),
    psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
    # a bounded wait's own error (service/db_limits.py): a hung server, not a bug
    psycopg.OperationalError("no answer from the database in 5.0 s: connection closed"),
], ids=["operational", "interface", "admin-shutdown", "bounded-wait"])
def test_a_drivers_own_lost_connection_is_a_503_not_a_500(raising, error) -> None:
    """A read made with the driver itself (a read model's query) meets a cut connection as
    psycopg's error, not wrapped by the event store: it was a 500 (builder, WaitJob)."""
    raising.raised.append(error)
    body = assert_error(raising.get("/raise"), 503, "Unavailable")
    assert body["message"].startswith("the database is unavailable: ")


def test_a_drivers_programming_error_is_still_a_500(raising) -> None:
    """Bad SQL of ours is a bug whatever the driver: it stays a 500."""
    raising.raised.append(psycopg.errors.SyntaxError('syntax error at or near "SELEC"'))
    assert raising.get("/raise").status_code == 500
