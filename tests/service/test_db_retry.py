"""``retry_transient``: a call tried again through transient database errors, with waits
that double up to a bound, until its deadline; any other error at once."""

from __future__ import annotations

import logging
import math
import time

import pytest
from eventsourcing.persistence import IntegrityError, InterfaceError, OperationalError

from service.db_retry import pauses, retry_transient


class Flaky:
    """Fails with ``error`` ``failures`` times, then answers ``"done"``."""

    def __init__(self, failures: float, error: Exception):
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "done"


def test_transient_errors_are_retried_with_waits_doubling_up_to_the_longest():
    waits: list[float] = []
    flaky = Flaky(6, InterfaceError("connection cut"))
    answer = retry_transient(flaky, until=lambda: math.inf, sleep=waits.append,
                             first_wait_s=0.1, longest_wait_s=1.0)
    assert (answer, flaky.calls) == ("done", 7)
    bounds = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert len(waits) == len(bounds)
    assert all(bound / 2 <= wait <= bound for wait, bound in zip(waits, bounds, strict=True))


def test_the_last_error_is_raised_rather_than_wait_past_the_deadline():
    waits: list[float] = []
    flaky = Flaky(math.inf, OperationalError("database is locked"))
    deadline = time.monotonic() + 0.5  # the first wait, 0.5 to 1 s, would pass it
    with pytest.raises(OperationalError, match="locked"):
        retry_transient(flaky, until=lambda: deadline, sleep=waits.append, first_wait_s=1.0)
    assert (flaky.calls, waits) == (1, [])
    # read again after each failure (a renewed lease moves it): here it comes after the first
    deadlines = iter([math.inf, time.monotonic()])
    flaky = Flaky(math.inf, OperationalError("database is locked"))
    with pytest.raises(OperationalError):
        retry_transient(flaky, until=lambda: next(deadlines), sleep=waits.append)
    assert (flaky.calls, len(waits)) == (2, 1)


def test_other_errors_and_a_raising_sleep_end_it_at_once():
    flaky = Flaky(1, IntegrityError("duplicate"))
    with pytest.raises(IntegrityError):
        retry_transient(flaky, until=lambda: math.inf, sleep=lambda _s: None)
    assert flaky.calls == 1

    class Stopped(Exception):
        pass

    def stopped(_seconds: float) -> None:
        raise Stopped

    flaky = Flaky(math.inf, OperationalError("refused"))
    with pytest.raises(Stopped):
        retry_transient(flaky, until=lambda: math.inf, sleep=stopped)
    assert flaky.calls == 1


def test_giving_up_is_logged_at_most_once_every_10_s_for_each_call(caplog):
    # tester: vmledger project, in an outage, logged "the event store's max_notification_id
    # failed 1 times; giving up before its deadline" every ~2 s beside its throttled line
    caplog.set_level(logging.WARNING, logger="vmledger.service.db_retry")
    for _ in range(5):
        with pytest.raises(OperationalError):
            retry_transient(Flaky(math.inf, OperationalError("connection refused")),
                            until=time.monotonic, what="a test's head read")
    [record] = caplog.records
    assert record.getMessage() == ("a test's head read failed; giving up before its deadline: "
                                   "connection refused (after 1 tries)")
    # another call's give-up is its own line
    with pytest.raises(OperationalError):
        retry_transient(Flaky(math.inf, OperationalError("refused")), until=time.monotonic,
                        what="a test's other read")
    assert len(caplog.records) == 2


def test_the_shared_schedule_doubles_up_to_the_longest_and_ends_before_the_deadline():
    # one schedule for retry_transient and the API's waits for a job (job_waits)
    deadline = time.monotonic() + 60
    schedule = pauses(lambda: deadline, 0.1, 0.5)
    bounds = [0.1, 0.2, 0.4, 0.5, 0.5]
    taken = [next(schedule) for _ in bounds]
    assert all(bound / 2 <= pause <= bound for pause, bound in zip(taken, bounds, strict=True))
    assert list(pauses(time.monotonic, 0.1, 0.5)) == []  # the first pause would pass it
