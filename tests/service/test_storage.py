"""The event store's extensions: a projection process is woken by other processes' appends
(PostgreSQL ``LISTEN``), not only by its poll."""

from __future__ import annotations

import threading

from service.container import Services
from service.settings import Settings
from service.storage import wake_on_appends
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
