"""What a database failure is said as to a client (service/redaction.py,
``database_failures.database_cause``): the driver's first meaningful line, never a password
nor a URL's credentials, bounded in length; and the pool's timeout naming why its last
connection attempt failed (``db_limits.ExplainingPool``)."""

from __future__ import annotations

import psycopg
import pytest
from eventsourcing.persistence import OperationalError

from service.database_failures import CAUSE_LIMIT, database_cause
from service.database_url import postgres_target
from service.db_limits import BoundedConnection, ExplainingPool
from service.redaction import redacted
from tests.integration.processes import free_port

REFUSED = ('connection failed: connection to server at "10.0.0.5", port 5432 failed: '
           'Connection refused\n\tIs the server running on that host and accepting TCP/IP '
           'connections?')


def _wrapped(driver_error: BaseException) -> OperationalError:
    """``driver_error`` as the event store raises it: wrapped, the driver's the cause."""
    wrapper = OperationalError(str(driver_error))
    wrapper.__cause__ = driver_error
    return wrapper


def test_the_cause_is_the_drivers_first_line_not_its_class() -> None:
    fatal = psycopg.OperationalError(
        'connection failed: connection to server at "10.0.0.5", port 5432 failed: FATAL:  '
        'database "t4_a" is not currently accepting connections\n')
    assert database_cause(_wrapped(fatal)) == (
        'connection failed: connection to server at "10.0.0.5", port 5432 failed: FATAL: '
        'database "t4_a" is not currently accepting connections')
    assert database_cause(_wrapped(psycopg.OperationalError(REFUSED))) == (
        'connection failed: connection to server at "10.0.0.5", port 5432 failed: '
        'Connection refused')


def test_any_other_error_is_said_by_its_first_line_else_its_class() -> None:
    assert database_cause(OSError("connection refused")) == "connection refused"
    assert database_cause(RuntimeError("\n\n  - the first\nthe second")) == "the first"
    assert database_cause(TimeoutError()) == "TimeoutError"


@pytest.mark.parametrize("said", [
    'could not connect with "postgresql://app:Sw0rdf1sh@db.example:5432/ledger"',
    "postgres://app:Sw0rdf1sh@db.example/ledger refused",
    "invalid dsn: host=db.example user=app password=Sw0rdf1sh dbname=ledger",
    "invalid dsn: host=db.example password='Sw0rd f1sh' dbname=ledger",
    "kwargs {'host': 'db.example', 'password': 'Sw0rdf1sh'}",
    "scheme://app:Sw0rd@f1sh@db.example/ledger",  # an unencoded @ in the password
])
def test_no_password_nor_url_credentials_are_ever_said(said) -> None:
    cause = database_cause(_wrapped(psycopg.OperationalError(said)))
    assert "Sw0rd" not in cause and "f1sh" not in cause, cause
    assert "***" in cause


def test_a_password_the_process_was_given_is_masked_wherever_it_appears() -> None:
    # libpq echoes a connection string it cannot parse, a password with a space in it
    target = postgres_target("postgresql://app:p%20w-Given-7@db.example:5432/ledger")
    said = f'unexpected spaces found in "{target.password}", use percent-encoded spaces'
    assert target.password not in database_cause(psycopg.ProgrammingError(said))
    assert redacted("p%20w-Given-7 and p w-Given-7") == "*** and ***"


def test_a_long_cause_is_cut_to_its_bound() -> None:
    cause = database_cause(psycopg.OperationalError("FATAL: " + "x" * 5000))
    assert len(cause) == CAUSE_LIMIT and cause.endswith("…")


def test_the_pools_timeout_names_its_last_connection_attempts_failure() -> None:
    port = free_port()  # nothing listens there: every attempt is refused
    pool = ExplainingPool(connection_class=BoundedConnection, min_size=1, max_size=1,
                          kwargs={"host": "127.0.0.1", "port": port, "dbname": "x",
                                  "user": "app", "password": "Sw0rdf1sh",
                                  "connect_timeout": 2},
                          open=False, timeout=1.0, reconnect_timeout=2.0)
    pool.open(wait=False)
    try:
        with pytest.raises(psycopg.OperationalError) as raised:
            pool.getconn(timeout=1.0)
    finally:
        pool.close()
    cause = database_cause(_wrapped(raised.value))
    assert cause.startswith("couldn't get a connection after 1.00 sec; the last connection "
                            "attempt: connection failed: "), cause
    assert "Connection refused" in cause and "Sw0rdf1sh" not in cause
