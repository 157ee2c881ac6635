"""A replay from an old position passes the log's old gaps (positions of appends that rolled
back long ago) without waiting on each (service/changes/reader.py): one proof that no
transaction which could still commit below the head is running covers every gap below it,
and a stream catching up with the change hub passes every gap the hub passed. Counted in
reads of the log and reads that stopped before a gap (after each, the caller waits), not in
wall time; an append in flight below the head is still delivered in its place. PostgreSQL
only: SQLite's rolled-back appends leave no gap."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from service.changes.filters import ChangeFilter
from service.changes.reader import LogReader
from service.changes.tail import tail
from tests.changes.live import Event, live_app, live_server, sse_events
from tests.changes.scenarios import (OWNER_A, create_vm, log_positions, stored_created,
                                     unlocked_append)
from tests.waiting import wait_until

GAPS = 30


@pytest.fixture
def gapped(services, settings) -> Iterator[list[int]]:
    """A log of ``GAPS`` VMs with a rolled-back append after each; its positions."""
    if settings.backend != "postgres":
        pytest.skip("a rolled-back append leaves a gap on PostgreSQL only")
    with psycopg.connect(settings.database_url) as conn:
        for _ in range(GAPS):
            create_vm(services, OWNER_A)
            unlocked_append(conn, services, stored_created(services)[1])  # draws a position ...
            conn.rollback()  # ... that no event will ever hold
    positions = log_positions(services, 0)
    assert positions[-1] - len(positions) == GAPS - 1  # the last gap is past the head
    yield positions


class ReadCounter:
    """Counts ``LogReader.read_after`` calls, and those that stopped before a gap (after
    each, its caller waits before reading again), in all and by reader."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.reads, self.held = Counter[LogReader](), Counter[LogReader]()
        original = LogReader.read_after
        lock = threading.Lock()

        def counted(reader: LogReader, *args, **kwargs):
            found = original(reader, *args, **kwargs)
            with lock:
                self.reads[reader] += 1
                self.held[reader] += reader.waiting_on_gap
            return found

        monkeypatch.setattr(LogReader, "read_after", counted)


class InFlight:
    """An append held open (its position drawn, not committed), then a later one committed:
    the held one must be delivered in its place once it commits."""

    def __init__(self, services, settings):
        self.holder = psycopg.connect(settings.database_url)
        unlocked_append(self.holder, services, stored_created(services)[1])
        with psycopg.connect(settings.database_url, autocommit=True) as other:
            unlocked_append(other, services, stored_created(services)[1])

    def commit(self) -> None:
        self.holder.commit()
        self.holder.close()


def test_the_command_line_replays_old_gaps_without_a_wait_for_each(
        services, gapped, monkeypatch):
    counter = ReadCounter(monkeypatch)
    printed: list[int] = []
    tail(services, 0, ChangeFilter(), follow=False,
         emit=lambda change: printed.append(change.position), stop=threading.Event())
    assert printed == gapped
    # it proved each gap alone, three reads apiece: 87 reads, 58 of them held (each a wait)
    assert counter.held.total() <= 1, counter.held
    assert counter.reads.total() <= 3, counter.reads


def test_a_stream_catching_up_passes_old_gaps_without_a_wait_for_each(
        services, gapped, monkeypatch):
    with live_server(services, background=False) as url:
        counter = ReadCounter(monkeypatch)  # the hub's own reads, from the head, too
        received: list[int] = []
        with httpx.Client(timeout=30) as client, \
                client.stream("GET", f"{url}/changes?after=0") as response:
            for event in sse_events(response):
                if event is not None:
                    received.append(int(event.id))
                if received and received[-1] == gapped[-1]:
                    break
    assert received == gapped
    assert counter.held.total() <= 1, counter.held
    assert counter.reads.total() <= 10, counter.reads


def test_the_command_line_delivers_an_append_in_flight_below_the_head_in_its_place(
        services, settings, gapped, monkeypatch):
    # The proof that passes old gaps must not pass one whose append may still commit.
    counter = ReadCounter(monkeypatch)
    in_flight = InFlight(services, settings)
    printed: list[int] = []
    stop = threading.Event()
    follower = threading.Thread(target=tail, args=(services, 0, ChangeFilter()), kwargs={
        "follow": True, "emit": lambda change: printed.append(change.position),
        "stop": stop}, daemon=True)
    follower.start()
    try:
        wait_until(lambda: counter.held, "the reader to stop before a gap")
        in_flight.commit()
        wait_until(lambda: len(printed) == len(gapped) + 2, "both appends to be printed")
    finally:
        stop.set()
        follower.join(10)
    assert printed[:-2] == gapped
    held, later = printed[-2:]
    assert gapped[-1] < held < later


def test_a_stream_catching_up_passes_what_the_hub_passed_while_an_append_is_in_flight(
        services, settings, gapped, monkeypatch):
    with live_app(services, background=False) as (url, app), httpx.Client(timeout=30) as client:
        with client.stream("GET", f"{url}/changes") as _first:  # starts the hub, at the head
            wait_until(lambda: getattr(app.state, "change_hub", None) is not None
                       and app.state.change_hub._task is not None, "the hub to start")
        hub = app.state.change_hub
        wait_until(lambda: hub._start_proof is None, "the hub to settle the log below its start")
        counter = ReadCounter(monkeypatch)
        in_flight = InFlight(services, settings)
        hub.wake()
        wait_until(lambda: hub._reader.waiting_on_gap, "the hub to stop before the append in flight")
        received: list[Event] = []
        with client.stream("GET", f"{url}/changes?after=0") as response:
            events = (event for event in sse_events(response) if event is not None)
            received += [next(events) for _ in gapped]
            in_flight.commit()
            hub.wake()
            received += [next(events), next(events)]
    catching_up = [reader for reader in counter.reads if reader is not hub._reader]
    assert [counter.held[reader] for reader in catching_up] == [0]
    positions = [int(event.id) for event in received]
    assert positions[:-2] == gapped
    held, later = positions[-2:]
    assert gapped[-1] < held < later


def test_a_transaction_left_open_holds_a_replay_once_not_once_per_gap(
        services, settings, gapped):
    in_flight = InFlight(services, settings)  # never committed while read
    now, skipped = [0.0], []
    reader = LogReader(services.app.recorder, gap_timeout_s=60, clock=lambda: now[0],
                       on_gap_skipped=lambda: skipped.append(now[0]))
    try:
        first, cursor = reader.read_after(0, 1000)
        assert reader.waiting_on_gap and [n.id for n in first] == gapped[:len(first)]
        now[0] = 59.0
        assert reader.read_after(cursor, 1000) == ([], cursor)
        now[0] = 60.0
        rest, _ = reader.read_after(cursor, 1000)
    finally:
        in_flight.commit()
    # every old gap and the position held open are passed at once: the one a stuck session
    # may hold is given up on, as each would be after waiting as long
    assert not reader.waiting_on_gap
    assert [n.id for n in first + rest] == [*gapped, gapped[-1] + 3]
    assert skipped == [60.0]
