"""The event store's extensions: a projection process is woken by other processes' appends
(PostgreSQL ``LISTEN``), not only by its poll."""

from __future__ import annotations

import logging
import threading

import pytest

from domain.vm import make_cause
from service.container import Services
from service.settings import Settings
from service.append_wakeups import wake_on_appends
from tests.builders import create


def settings_for(url: str) -> Settings:
    return Settings(database_url=url, sim_servers=1)


def test_an_append_by_another_process_wakes_the_listener_on_postgresql(postgres_url):
    settings = settings_for(postgres_url)
    listening, appending = Services.build(settings), Services.build(settings)
    woken, stop = threading.Event(), threading.Event()
    wakes: list[int] = []

    def wake() -> None:
        wakes.append(1)
        woken.set()

    try:
        thread = wake_on_appends(listening.app.recorder, wake, stop)
        assert thread is not None
        assert woken.wait(10)  # the first wake-up: whatever came before it listened
        woken.clear()
        create(appending)  # another Services: its own pool, as another process would be
        assert woken.wait(10)
    finally:
        stop.set()
        listening.close()
        appending.close()
    thread.join(5)
    assert not thread.is_alive()
    assert len(wakes) >= 2


def test_no_listener_on_sqlite(tmp_path):
    services = Services.build(settings_for(f"sqlite:///{tmp_path / 'vmledger.db'}"))
    try:
        assert wake_on_appends(services.app.recorder, lambda: None, threading.Event()) is None
    finally:
        services.close()


def test_a_conflicting_append_on_postgresql_commits_nothing_and_leaves_the_connection_clean(
    postgres_url, caplog,
):
    # The insert sends COMMIT in the same flush as the INSERT (service/group_commit.py): when the
    # INSERT fails, the COMMIT is skipped with it; nothing may be committed, and no connection
    # may go back to the pool inside a transaction (the pool would warn and roll it back).
    from eventsourcing.persistence import IntegrityError

    from tests.conftest import _empty_schema

    _empty_schema(postgres_url)
    services = Services.build(settings_for(postgres_url))
    try:
        vm_uuid = create(services).vm_uuid
        head = services.commands.head_position()
        for attempt in range(12):  # more than the pool's connections
            stale = services.commands.load(vm_uuid, version=1)
            stale.update_metadata({"alias": f"loser-{attempt}"}, cause=make_cause())
            with caplog.at_level(logging.WARNING), pytest.raises(IntegrityError):
                services.app.save(stale)
        assert services.commands.head_position() == head
        vm = services.commands.load(vm_uuid)
        vm.update_metadata({"alias": "winner"}, cause=make_cause())
        services.app.save(vm)
        assert services.commands.load(vm_uuid).alias == "winner"
    finally:
        services.close()
    assert not [r for r in caplog.records if "rolling back" in r.getMessage()]



class CountingStop(threading.Event):
    """A stop event whose waits return at once, counting them: a loop that waits a second
    between failures runs through many of them in a test."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0
        self.waited = threading.Condition()

    def wait(self, timeout: float | None = None) -> bool:
        with self.waited:
            self.waits += 1
            self.waited.notify_all()
        return self.is_set()


def test_the_listener_logs_an_outage_once_not_every_reconnect(postgres_url, monkeypatch,
                                                              caplog):
    # found by a tester: one warning a second for as long as PostgreSQL was away
    import psycopg

    services = Services.build(settings_for(postgres_url))

    def refused(**_params: object) -> None:
        raise psycopg.OperationalError('database "gone" does not exist')

    monkeypatch.setattr("service.append_wakeups.psycopg.connect", refused)
    stop = CountingStop()
    try:
        with caplog.at_level(logging.WARNING, logger="vmledger.service.append_wakeups"):
            thread = wake_on_appends(services.app.recorder, lambda: None, stop)
            with stop.waited:
                assert stop.waited.wait_for(lambda: stop.waits >= 20, timeout=10)
            stop.set()
            thread.join(5)
    finally:
        services.close()
    lines = [r for r in caplog.records if "listening for appends" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelname == "WARNING"
    assert 'database "gone" does not exist' in lines[0].getMessage()
