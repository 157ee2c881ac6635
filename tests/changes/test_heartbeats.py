"""Heartbeats: a change stream with nothing to send sends one every ``heartbeat_s``, however
often the hub reads the log meanwhile and whatever it reads that the stream does not show
(an idle stream must not look dead to a proxy, nor a client wait forever to learn it has
caught up)."""

from __future__ import annotations

import asyncio

from service.changes.filters import ChangeFilter
from service.changes.hub import ChangeHub, HubLimits
from tests.changes.scenarios import OWNER_A, OWNER_B, create_vm
from tests.changes.test_limits import run

# The hub reads the log 20 times a heartbeat; a stream woken by each read (and so waiting
# for its heartbeat anew each time) would see one only when two reads fall 0.2 s apart.
LIMITS = HubLimits(poll_s=0.01, heartbeat_s=0.2)
BOUND_S = 10.0  # far beyond heartbeat_s, for a loaded machine


def test_an_idle_stream_sends_heartbeats_while_the_hub_polls_more_often(services):
    async def scenario() -> list[object]:
        hub = ChangeHub(services.app, LIMITS)
        stream = hub.stream(None, ChangeFilter())
        try:
            return [await asyncio.wait_for(anext(stream), BOUND_S) for _ in range(3)]
        finally:
            await hub.close()

    assert run(scenario()) == [None, None, None]


def test_changes_a_stream_does_not_show_do_not_hold_back_its_heartbeat(services):
    async def scenario() -> tuple[list[object], int]:
        hub = ChangeHub(services.app, LIMITS)
        services.commands.after_save.append(hub.wake)
        stream = hub.stream(None, ChangeFilter(owner_uuid=OWNER_B))
        stop = asyncio.Event()

        async def write_owner_a() -> int:  # the hub reads something new at every pass
            written = 0
            while not stop.is_set():
                await asyncio.to_thread(create_vm, services, OWNER_A)
                written += 1
            return written

        writer = asyncio.create_task(write_owner_a())
        try:
            beats = [await asyncio.wait_for(anext(stream), BOUND_S) for _ in range(2)]
        finally:
            stop.set()
            written = await writer
            await hub.close()
        return beats, written

    beats, written = run(scenario())
    assert beats == [None, None]  # heartbeats, and none of owner A's changes
    assert written > 0
