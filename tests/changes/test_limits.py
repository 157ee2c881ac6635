"""Back-pressure and limits: a stream whose reader falls behind is cut with its reason and
resumes from its last id with nothing lost; a stream over the process's limit is refused
(503); the figures are on /metrics."""

from __future__ import annotations

import asyncio
import threading

import httpx

from service.changes.filters import ChangeFilter
from service.changes.hub import ChangeHub, HubLimits, StreamEnd
from service.changes.records import Change
from tests.changes.live import live_app, sse_events
from tests.waiting import wait_until
from tests.changes.scenarios import OWNER_A, create_vm, log_positions


def run(coroutine):
    """``asyncio.run`` in a thread of its own (a test before may leave an event loop running
    in this one: Playwright's sync API does)."""
    result: dict = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coroutine)
        except BaseException as error:  # noqa: BLE001 - raised in the test's thread
            result["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def test_a_stream_too_far_behind_is_cut_and_resumes_without_loss(services):
    async def scenario() -> tuple[list[int], StreamEnd, list[int], int]:
        hub = ChangeHub(services.app, HubLimits(buffer=5, poll_s=0.02, heartbeat_s=0.05))
        services.commands.after_save.append(hub.wake)
        start = services.commands.head_position()
        slow = hub.stream(None, ChangeFilter())
        first = await anext(slow)  # a heartbeat: subscribed, at the head
        assert first is None
        for _ in range(6):  # 12 changes while the stream's reader takes none
            await asyncio.to_thread(create_vm, services, OWNER_A)
        until_cut = []
        end = None
        while end is None:
            item = await anext(slow)
            if isinstance(item, Change):
                until_cut.append(item.position)
            elif isinstance(item, StreamEnd):
                end = item
        head = services.commands.head_position()
        resumed = []
        async for item in hub.stream(end.resume_after, ChangeFilter()):
            if isinstance(item, Change):
                resumed.append(item.position)
                if item.position == head:
                    break
        await hub.close()
        return until_cut, end, resumed, start

    until_cut, end, resumed, start = run(scenario())
    assert "too far behind" in end.reason
    assert until_cut == [] and end.resume_after == start  # cut before it was sent anything
    assert resumed == log_positions(services, start)


def test_streams_over_the_limit_are_refused_and_counted(services):
    services.settings.changes_max_streams = 1
    with live_app(services, background=False) as (url, app), \
            httpx.Client(base_url=url, timeout=30) as client:
        with client.stream("GET", "/changes") as first:
            assert first.status_code == 200
            events = sse_events(first)  # kept: dropping it would hang up
            next(events)  # the opening comment: the stream is open
            refused = client.get("/changes")
            assert refused.status_code == 503
            assert "1 change streams" in refused.json()["message"]
            metrics = client.get("/metrics").text
            assert 'vmledger_change_streams{protocol="sse"} 1.0' in metrics
            assert 'vmledger_change_streams_dropped_total{reason="limit"}' in metrics
        create_vm(services, OWNER_A)
        wait_until(lambda: not app.state.change_hub._open, "the first stream to close")
        with client.stream("GET", "/changes?after=0") as again:
            assert again.status_code == 200
            again_events = sse_events(again)
            assert next(e for e in again_events if e is not None).id == "1"
        sent = client.get("/metrics").text
        assert 'vmledger_changes_sent_total{protocol="sse"}' in sent


def test_a_position_past_the_head_waits_for_the_log_to_reach_it(services):
    async def scenario() -> tuple[int, list[int]]:
        hub = ChangeHub(services.app, HubLimits(poll_s=0.02, heartbeat_s=0.05))
        services.commands.after_save.append(hub.wake)
        head = services.commands.head_position()
        ahead = hub.stream(head + 3, ChangeFilter())
        assert await anext(ahead) is None  # nothing yet: it waits
        for _ in range(3):  # 6 events: positions head+1 .. head+6
            await asyncio.to_thread(create_vm, services, OWNER_A)
        got = []
        while len(got) < 3:
            item = await anext(ahead)
            if isinstance(item, Change):
                got.append(item.position)
        await hub.close()
        return head, got

    head, got = run(scenario())
    assert got == [head + 4, head + 5, head + 6]
