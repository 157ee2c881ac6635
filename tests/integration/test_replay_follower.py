"""The read models caught up beside a replay by a process of their own (``Follower``,
docs/replay.md, "The read models beside the replay")."""

from __future__ import annotations

import multiprocessing
import threading

from eventsourcing.persistence import OperationalError

from projections.runner import ProjectionRunner
from service.replay.follow import Follower, follow
from tests.waiting import wait_until
from tests.builders import create, read_model_tables, rows


def view_uuids(services) -> set[str]:
    return {row["uuid"] for row in rows(services, "vm_view")}


def test_the_follower_keeps_the_read_models_up_with_a_growing_log_until_told_to_finish(
        services, settings):
    runner = services.projections

    def at_head() -> bool:
        head = runner.head()
        return all(p == head for p in runner.positions().values())

    follower = Follower(settings)
    follower.start()
    try:
        for _ in range(2):  # it follows what is appended after it started, twice
            accepted = [create(services) for _ in range(5)]
            wait_until(at_head, timeout=60)
            assert {v.vm_uuid for v in accepted} <= view_uuids(services)
        create(services)
    except BaseException:
        follower.stop()  # the failure above is what the test reports, not a hung follower
        raise
    assert follower.finish()  # its last pass reaches what was appended before this
    assert at_head() and follower.applied > 0
    live = read_model_tables(services)
    runner.rebuild()
    assert read_model_tables(services) == live



def test_the_follower_tries_again_after_a_pass_that_met_a_locked_database(
        services, settings, monkeypatch):
    """SQLite's busy timeout can run out while the replay's committer takes the write lock
    batch after batch; the follower must not die of it (the whole shard's run lost it so)."""
    catch_up_models = ProjectionRunner.catch_up_models
    failures = []

    def locked_once(self, *args, **kwargs):
        if not failures:
            failures.append("locked")
            raise OperationalError("database is locked")
        return catch_up_models(self, *args, **kwargs)

    monkeypatch.setattr(ProjectionRunner, "catch_up_models", locked_once)
    accepted = [create(services) for _ in range(3)]
    done, applied = multiprocessing.Event(), multiprocessing.Value("q", 0)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            follow(settings, done, applied)
        except BaseException as error:  # noqa: BLE001 - the test reports it
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: applied.value > 0 or errors, timeout=60)
    finally:
        done.set()
        thread.join(60)
    assert not thread.is_alive() and errors == [] and failures == ["locked"]
    assert {v.vm_uuid for v in accepted} <= view_uuids(services)


def test_a_follower_whose_passes_keep_failing_logs_once_per_interval(
        services, settings, monkeypatch, caplog):
    # found by a tester: in a database outage the follower logged every pass, once a second
    import logging

    failures = []

    def always_locked(self, *args, **kwargs):
        failures.append(1)
        raise OperationalError("database is locked")

    monkeypatch.setattr(ProjectionRunner, "catch_up_models", always_locked)
    monkeypatch.setattr("service.replay.follow.IDLE_WAIT_S", 0.001)
    done, applied = multiprocessing.Event(), multiprocessing.Value("q", 0)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            follow(settings, done, applied)
        except BaseException as error:  # noqa: BLE001 - the last pass raises, as it must
            errors.append(error)

    with caplog.at_level(logging.WARNING, logger="vmledger.service.replay.follow"):
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        wait_until(lambda: len(failures) >= 20, timeout=60)
        done.set()
        thread.join(60)
    # the pass after the replay's end raises what the others met
    assert not thread.is_alive() and len(errors) == 1
    assert isinstance(errors[0], OperationalError) and "database is locked" in str(errors[0])
    lines = [r for r in caplog.records if "follower's pass failed" in r.getMessage()]
    assert len(lines) == 1 and "database is locked" in lines[0].getMessage()
