"""The projection lag is reported while passes fail (found by an operator-tester: the gauge
stayed at 0 while every pass failed and every read answered 503), and a read model past the
log's head shows a negative lag rather than 0 (projections/live.py, ``run_forever``;
``ProjectionRunner.report_lag``)."""

from __future__ import annotations

import threading

from projections.job_view import JobView
from projections.runner import ProjectionRunner
from projections.vm_view import VmView
from tests.builders import create
from tests.waiting import wait_until


class FailingJobView(JobView):
    """``job_view`` whose every batch fails, as one with an event it cannot apply (a name of
    its own: the service's runner keeps ``job_view`` caught up)."""

    name = "failing_job_view"

    def write(self, tx, events, stored):
        raise RuntimeError("cannot apply")


def test_a_failing_pass_still_reports_how_far_behind_the_read_models_are(services):
    create(services)
    create(services)
    lags: dict[str, int] = {}
    reported = threading.Event()

    def on_lag(name: str, lag: int) -> None:
        lags[name] = lag
        if lags.get("failing_job_view", 0) > 0:
            reported.set()

    errors: list[BaseException] = []
    runner = ProjectionRunner(services.db, services.app.recorder, services.app.mapper,
                              [FailingJobView()], on_lag=on_lag, lag_interval_s=0)
    stop = threading.Event()
    loop = threading.Thread(target=runner.run_forever, args=(stop, 0.01, errors.append))
    loop.start()
    try:
        assert reported.wait(10), lags
    finally:
        stop.set()
        loop.join(10)
    assert errors and lags["failing_job_view"] == services.app.recorder.max_notification_id()


def test_a_read_model_past_the_head_shows_a_negative_lag(services):
    create(services)
    runner = ProjectionRunner(services.db, services.app.recorder, services.app.mapper,
                              [VmView(services.app.mapper.transcoder)],
                              on_lag=lambda name, lag: lags.append((name, lag)))
    lags: list[tuple[str, int]] = []
    runner.catch_up()
    head = services.app.recorder.max_notification_id()
    with services.db.transaction() as tx:  # an edit of the table, as audit's finding says
        tx.execute("UPDATE projection_tracking SET position = ? WHERE name = 'vm_view'",
                   (head + 5,))
    runner.report_lag()
    assert lags[-1] == ("vm_view", -5)


def test_while_passes_fail_the_head_is_read_once_every_10_s_not_every_pass(services):
    # tester: in an outage each pass's lag read of the head waited out its retries and gave
    # up with a warning, one every ~2 s beside the runner's throttled line
    create(services)
    runner = ProjectionRunner(services.db, services.app.recorder, services.app.mapper,
                              [FailingJobView()], on_lag=lambda name, lag: None,
                              lag_interval_s=0)
    reads: list[int] = []
    real_head = runner.head
    runner.head = lambda: reads.append(1) or real_head()  # type: ignore[method-assign]
    errors: list[BaseException] = []
    stop = threading.Event()
    loop = threading.Thread(target=runner.run_forever, args=(stop, 0.01, errors.append))
    loop.start()
    try:
        wait_until(lambda: len(errors) >= 20, "20 failing passes")
    finally:
        stop.set()
        loop.join(10)
    assert len(reads) == 1  # the first failing pass's; the next comes 10 s after it
