"""An append held open and committed after later ones is delivered, once, in log order
(service/changes/reader.py). On PostgreSQL the later append commits first: both insert
without the event store's table lock (no vmledger writer does that), the case the reader
must not need the lock for. SQLite has one writer at a time: the held append is not seen
until it commits, and a later one waits for it."""

from __future__ import annotations

import sqlite3
import threading

import httpx
import psycopg

from tests.changes.live import live_app, sse_events
from tests.changes.scenarios import (OWNER_A, create_vm, stored_created,
                                     unlocked_append)
from tests.waiting import wait_until


class Collector(threading.Thread):
    """Reads ``GET /changes{query}`` into ``events`` until the stream ends."""

    def __init__(self, url: str, query: str = ""):
        super().__init__(daemon=True)
        self.url, self.events = url + "/changes" + query, []

    def run(self) -> None:
        with httpx.Client(timeout=60) as client, client.stream("GET", self.url) as response:
            try:
                for event in sse_events(response):
                    if event is not None:
                        self.events.append(event)
            except httpx.RemoteProtocolError:
                return  # the server stopped, cutting the stream


def test_an_append_committed_after_a_later_one_is_delivered_once_in_order(services, settings):
    recorder = services.app.recorder
    with live_app(services, background=False) as (url, app):
        collector = Collector(url)
        collector.start()
        wait_until(lambda: getattr(app.state, "change_hub", None) is not None
                   and app.state.change_hub._subscribers, "the stream to subscribe")
        hub = app.state.change_hub
        held_vm, held = stored_created(services)
        if settings.backend == "postgres":
            later_vm, later = stored_created(services)
            holder = psycopg.connect(settings.database_url)
            unlocked_append(holder, services, held)
            with psycopg.connect(settings.database_url, autocommit=True) as other:
                unlocked_append(other, services, later)
            hub.wake()
            # The hub read the later append and stopped before the held one's position.
            wait_until(lambda: hub._reader.waiting_on_gap, "the hub to meet the gap")
            assert recorder.max_notification_id() == hub.position + 2
        else:
            holder = sqlite3.connect(settings.database_url.removeprefix("sqlite:///"),
                                     isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")
            holder.execute(
                f"INSERT INTO {recorder.events_table_name} "
                "(originator_id, originator_version, topic, state) VALUES (?, ?, ?, ?)",
                (held.originator_id.hex, 1, held.topic, held.state))
            hub.wake()
            wait_until(lambda: hub._reader.head() == hub.position, "the hub to read the log")
        assert collector.events == []
        holder.commit()
        holder.close()
        if settings.backend == "sqlite":
            later_vm = create_vm(services, OWNER_A)
        hub.wake()
        wait_until(lambda: len(collector.events) >= 2, "both appends to be delivered")
    ids = [int(e.id) for e in collector.events]
    assert [e.json["vm_uuid"] for e in collector.events][:2] == [held_vm, later_vm]
    assert [e.event for e in collector.events][:2] == ["Created", "Created"]
    assert ids == sorted(set(ids)), "out of order or repeated"
