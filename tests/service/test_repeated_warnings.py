"""The database pool's repeated warnings (docs/operations.md, "Logs"): the same kind of line
from the same logger at most once every 10 s per process, the next one saying how many were
left out. Operator tester: a 30-s outage made each process's pool write ``error connecting
in 'pool-3': ...`` and ``reconnection attempt in pool 'pool-3' failed after 3.0 sec`` about
once a second (53 of ``project``'s 63 lines), never throttled."""

from __future__ import annotations

import logging

import pytest

from service import log_repeats
from service.log_repeats import Repeats
from service.logs import setup_logging
from service.settings import Settings

DB_LIMITS = "vmledger.service.db_limits"  # its pool's connections found closed by a cut


@pytest.fixture
def pool_logging(caplog, monkeypatch):
    """``setup_logging`` as ``vmledger project`` runs it; the psycopg loggers' levels and
    filters put back afterwards (later tests' caplog sees them as they were)."""
    loggers = [logging.getLogger(name) for name in ("psycopg", "psycopg.pool", DB_LIMITS)]
    saved = [(logger.level, list(logger.filters)) for logger in loggers]
    monkeypatch.setattr(log_repeats, "_PROCESS_REPEATS", None)  # nothing seen yet
    for logger in loggers:  # nor by one an earlier set-up left
        logger.filters[:] = [f for f in logger.filters if not isinstance(f, Repeats)]
    setup_logging(Settings(log_format="text"))
    yield lambda: [f"{r.levelname} {r.name}: {r.getMessage()}" for r in caplog.records]
    for logger, (level, filters) in zip(loggers, saved):
        logger.setLevel(level)
        logger.filters[:] = filters


def test_a_process_logs_a_pool_warning_that_repeats_once_not_every_second(pool_logging):
    pool = logging.getLogger("psycopg.pool")  # the logger psycopg_pool writes to
    for _ in range(30):  # 30 s of an outage, as psycopg_pool words it
        pool.warning("error connecting in %r: %s", "pool-3", "connection failed: refused")
        pool.warning("reconnection attempt in pool %r failed after %s sec", "pool-3", 3.0)
    logging.getLogger("psycopg").warning("another kind, from another logger")
    lines = pool_logging()
    assert lines == [
        "WARNING psycopg.pool: error connecting in 'pool-3': connection failed: refused",
        "WARNING psycopg.pool: reconnection attempt in pool 'pool-3' failed after 3.0 sec",
        "WARNING psycopg: another kind, from another logger"]


def test_a_process_logs_connections_found_closed_once_not_once_per_cut(pool_logging):
    """Operator tester: 10 cuts (``pg_terminate_backend``) in 6.5 s made ``serve`` log
    ``pooled database connections found closed by the server`` 37 times, the one outage
    logger (docs/operations.md, "Logs") without the filter."""
    closed = logging.getLogger(DB_LIMITS)
    for _ in range(37):
        closed.warning("pooled database connections found closed by the server: "
                       "checking the others")
    assert pool_logging() == [
        (f"WARNING {DB_LIMITS}: pooled database connections found closed by the server: "
         "checking the others")]


def test_a_repeated_line_is_logged_again_after_10_s_counting_those_left_out(caplog):
    now = [0.0]
    repeats = Repeats(interval_s=10, clock=lambda: now[0])
    log = logging.getLogger("vmledger.test.repeats")
    log.addFilter(repeats)
    try:
        with caplog.at_level(logging.WARNING, logger="vmledger.test.repeats"):
            for _ in range(13):  # one a second
                log.warning("error connecting in %r: %s", "pool-3", "refused")
                now[0] += 1.0
            log.warning("discarding closed connection: %s", "<conn>")  # another kind: at once
            now[0] = 40.0  # after a quiet spell: at once, counting the two left out before it
            log.warning("error connecting in %r: %s", "pool-3", "refused again")
    finally:
        log.removeFilter(repeats)
    assert [r.getMessage() for r in caplog.records] == [
        "error connecting in 'pool-3': refused",
        "error connecting in 'pool-3': refused (9 similar lines left out in the last 10 s)",
        "discarding closed connection: <conn>",
        ("error connecting in 'pool-3': refused again"
         " (2 similar lines left out in the last 30 s)")]


def test_the_first_line_of_an_outage_is_logged_at_once(pool_logging):
    logging.getLogger("psycopg.pool").warning("error connecting in %r: %s", "pool-9", "x")
    [line] = pool_logging()
    assert line == "WARNING psycopg.pool: error connecting in 'pool-9': x"
