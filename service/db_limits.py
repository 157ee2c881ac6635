"""Bounds on every wait for the database (issue #13, docs/jobs.md "Outages"): the recorder
calls' retries bounded in time, and, within an HTTP request, each PostgreSQL call's wait for
the server's answer (``request_waits_bounded``, ``BoundedConnection``). ``bound_waits`` applies
them to an application's recorder before its pool opens."""

from __future__ import annotations

import functools
import logging
import math
import select
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import psycopg
from eventsourcing.postgres import ConnectionPool as LibraryPool
from eventsourcing.postgres import PostgresDatastore
from psycopg_pool import ConnectionPool, PoolTimeout
from psycopg.errors import _WaitTimeout  # what psycopg's own wait raises on its timeout

from service.db_retry import retry_transient
from service.redaction import one_line

if TYPE_CHECKING:
    from eventsourcing.application import Application

    from service.settings import Settings

log = logging.getLogger(f"vmledger.{__name__}")

# The recorder calls the library retries 10 times, 0.2 s apart, each try waiting up to the
# pool's timeout: with the database down a request took 42-52 s to fail (issue #13).
_RETRIED_CALLS = ("insert_events", "select_events", "select_notifications",
                  "max_notification_id", "insert_batch", "select_stream",
                  "select_versions", "select_present")


# How long a database call made for an HTTP request waits for the server's answer (None:
# outside a request, only the server's statement timeout bounds it). Set by
# ``request_waits_bounded``, read by ``BoundedConnection.wait``.
_request_wait_s: ContextVar[float | None] = ContextVar("vmledger_request_wait_s", default=None)


@contextmanager
def request_waits_bounded(seconds: float) -> Iterator[None]:
    """Within this context (an HTTP request: service/api/envelope.py) every PostgreSQL
    call waits ``seconds`` at most for the server's answer."""
    token = _request_wait_s.set(seconds)
    try:
        yield
    finally:
        _request_wait_s.reset(token)


def request_wait_bound() -> float | None:
    """The current HTTP request's bound on each database wait (s), or None outside one: for
    waits that are not a connection's own (the committer's answer, service/commands)."""
    return _request_wait_s.get()


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose waits for the server, within an HTTP request, end after
    the request's bound: a peer that acknowledges but never answers (a hung server, a
    partition in front of a proxy) would otherwise hold the request, whatever the TCP
    timeouts, until the network heals (issue #13, input 8). The connection is closed then (its
    protocol state is unknown) and the pool opens another; the call raises
    ``psycopg.OperationalError``, a 503 for the client, which may retry (with an
    ``Idempotency-Key`` a command's retry is safe whether or not it was applied)."""

    def wait(self, gen: Any, interval: float | None = None, timeout: float | None = None
             ) -> Any:
        bound = _request_wait_s.get() if timeout is None else None
        options: dict[str, float] = {} if interval is None else {"interval": interval}
        if bound is None:
            return super().wait(gen, timeout=timeout, **options)
        try:
            return super().wait(gen, timeout=bound, **options)
        except _WaitTimeout:
            self.close()
            raise psycopg.OperationalError(
                f"no answer from the database in {bound} s: connection closed") from None


class DeadConnectionProbe:
    """The pool's ``check``: refuses a pooled connection the server has closed, before the
    caller sends anything on it, so that it gets a live one instead. Without it, after the
    service's connections were cut while the database stayed up (``pg_terminate_backend``,
    a proxy or a server restart), each idle pooled connection failed its next call once:
    503s for tens of seconds (docs/jobs.md, "Outages"). Nothing was sent yet, so this holds
    for writes too.

    An idle connection has nothing to read unless the server spoke first: it ended the
    session (its ``FATAL`` then end of file) or, rarely, sent a notice. So a poll of the
    socket, no round trip, decides; a round trip (``check_connection``) is paid only when
    something is there. A dead one raises ``psycopg.OperationalError``, and the pool discards
    it and hands out another. Then every idle connection is checked at once (``pool.check``,
    a round trip each, dead ones fail at once): a cut closes all of them, and the pool pauses
    about 1 s before a second try of its own, which would exceed the request's wait."""

    def __init__(self) -> None:
        self.pool: Callable[[], ConnectionPool[Any] | None] = lambda: None

    def __call__(self, conn: psycopg.Connection[Any]) -> None:
        if not conn.closed and not _input_waiting(conn):
            return
        try:
            ConnectionPool.check_connection(conn)
        except psycopg.Error:
            pool = self.pool()
            if pool is not None:
                log.warning("pooled database connections found closed by the server: "
                            "checking the others")
                pool.check()
            raise


def _input_waiting(conn: psycopg.Connection[Any]) -> bool:
    """Whether the server sent something (or closed) on an idle connection: no waiting."""
    poller = select.poll()
    poller.register(conn.pgconn.socket, select.POLLIN)
    return bool(poller.poll(0))


class ExplainingPool(LibraryPool[Any]):
    """The library's pool, whose ``PoolTimeout`` says why its last attempt to open a
    connection failed, if it did (``couldn't get a connection after 1.00 sec; the last
    connection attempt: connection failed: ... FATAL: database "x" is not currently accepting
    connections``): the pool opens connections in its own threads and only logs their
    failures, so its timeout said nothing of the cause (``/ping`` said ``OperationalError``
    where the log said ``FATAL``: operator tester). A pool short of connections for another
    reason (all lent) times out as before, its last attempt having succeeded."""

    last_connect_failure: str | None = None

    def _connect(self, timeout: float | None = None) -> Any:
        # the library's own pool overrides this too (its password callback)
        try:
            conn = super()._connect(timeout=timeout)
        except Exception as error:
            self.last_connect_failure = one_line(str(error), 200) or type(error).__name__
            raise
        self.last_connect_failure = None
        return conn

    def getconn(self, timeout: float | None = None) -> Any:
        """A pooled connection; raises ``PoolTimeout`` naming the last connection attempt's
        failure, if any, when none comes within ``timeout`` (s; the pool's own if None)."""
        try:
            return super().getconn(timeout=timeout)
        except PoolTimeout as error:
            failure = self.last_connect_failure
            if failure is None:
                raise
            raise PoolTimeout(f"{error}; the last connection attempt: {failure}") from None


def bound_waits(app: Application[Any], settings: Settings) -> None:
    """Bound every wait for PostgreSQL (docs/jobs.md, "Outages"), on every connection: a
    request waits ``postgres_pool_wait_s`` for a pooled connection; a connection takes
    ``postgres_connect_timeout_s`` to open at most; one left unanswered (data unacknowledged,
    keepalive probes lost: a silent partition) is dropped after ``postgres_network_timeout_s``;
    the server ends a statement after ``postgres_statement_timeout_s`` and a lock wait after
    ``postgres_lock_timeout_s``; within an HTTP request a call waits
    ``postgres_request_wait_s`` at most for its answer (``BoundedConnection``); a pool that
    cannot reconnect gives up its attempt within a few seconds and starts afresh on the next
    request, so service is back within about that of the database; a connection the server
    closed while idle is never lent (``DeadConnectionProbe``). The event store's calls are retried for ``database_retry_s`` at most
    (the library's own retry is taken off). Nothing on SQLite, whose writers wait for each
    other (``SQLITE_LOCK_TIMEOUT``) and which has no network."""
    datastore = getattr(app.recorder, "datastore", None)
    if not isinstance(datastore, PostgresDatastore):
        return
    if datastore.pool.connection_class is not BoundedConnection:  # no ``bound_pool`` yet
        # The library opened its pool with its defaults as the app was built: replace it
        # (changing the open pool would race the connections it is opening).
        bound_pool(datastore, settings)
    for recorder in (app.recorder, getattr(app.snapshots, "recorder", None)):
        if recorder is not None:
            _retry_within(recorder, settings.database_retry_s)


def bound_pool(datastore: Any, settings: Settings) -> None:
    """Put a pool with ``bound_waits``' bounds in place of the PostgreSQL ``datastore``'s
    own, and close that one (nothing on SQLite). Given to ``VmLedger`` as its
    ``on_datastore``, before the library opens its pool: one pool opens, not two."""
    if not isinstance(datastore, PostgresDatastore):
        return
    old = datastore.pool
    assert isinstance(old.kwargs, dict)
    probe = DeadConnectionProbe()
    options = (f"-c statement_timeout={int(settings.postgres_statement_timeout_s * 1000)} "
               f"-c lock_timeout={settings.postgres_lock_timeout_s * 1000}")
    datastore.pool = ExplainingPool(
        connection_class=BoundedConnection,
        kwargs={**old.kwargs, "connect_timeout": settings.postgres_connect_timeout_s,
                "keepalives": 1, "keepalives_idle": 1, "keepalives_interval": 1,
                "keepalives_count": 2,
                "tcp_user_timeout": int(settings.postgres_network_timeout_s * 1000),
                "options": options},
        min_size=old.min_size, max_size=old.max_size, open=False,
        configure=old._configure,  # noqa: SLF001 - the library's own
        check=old._check or probe,  # the library's pre_ping, if one was asked for
        timeout=settings.postgres_pool_wait_s, max_waiting=old.max_waiting,
        max_lifetime=old.max_lifetime,
        reconnect_timeout=max(2.0, settings.postgres_connect_timeout_s + 1.0),
        get_password_func=old.get_password_func)
    probe.pool = weakref.ref(datastore.pool)
    old.close()


def _retry_within(recorder: object, budget_s: float) -> None:
    """Replace the library's retry of the recorder's calls by one that gives up after
    ``budget_s`` (50 ms, 100 ms, ... between tries)."""
    for name in _RETRIED_CALLS:
        method = getattr(type(recorder), name, None)
        if method is None:
            continue
        once = getattr(method, "__wrapped__", method).__get__(recorder)
        setattr(recorder, name, _retrying(once, budget_s))


def _retrying(call: Callable[..., Any], budget_s: float) -> Callable[..., Any]:
    """``call`` retried through transient database errors (``retry_transient``) for at most
    ``budget_s`` from each call, its waits doubling without bound."""
    @functools.wraps(call)
    def retrying(*args: Any, **kwargs: Any) -> Any:
        give_up_at = time.monotonic() + budget_s
        return retry_transient(lambda: call(*args, **kwargs), until=lambda: give_up_at,
                               what=f"the event store's {call.__name__}",
                               longest_wait_s=math.inf, level=logging.DEBUG)

    return retrying
