"""``LongLivedFrozen`` (projections/collector.py): a process's long-lived objects kept from the
garbage collector's full collections, frozen every few seconds and thawed with one full
collection every few minutes."""

from __future__ import annotations

import gc
import threading

import pytest

from projections.collector import LongLivedFrozen
from projections.live import BackgroundLoop


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def collector(monkeypatch) -> list[str]:
    calls: list[str] = []
    for name in ("freeze", "unfreeze", "collect"):
        monkeypatch.setattr(gc, name, lambda *args, name=name: calls.append(name))
    return calls


def test_it_freezes_every_few_seconds_and_thaws_with_a_full_collection(collector):
    clock = Clock()
    frozen = LongLivedFrozen(freeze_every_s=5, collect_every_s=60, clock=clock)
    for at, expected in [(0, []), (4.9, []), (5, ["freeze"]), (7, []), (10, ["freeze"]),
                         (60, ["unfreeze", "collect"]), (62, []), (65, ["freeze"])]:
        clock.now = 1000.0 + at
        frozen.tick()
        assert collector == expected, at
        collector.clear()


def test_frozen_objects_leave_the_collected_generations_until_the_thaw():
    clock = Clock()
    frozen = LongLivedFrozen(freeze_every_s=5, collect_every_s=60, clock=clock)
    kept = [[n] for n in range(10_000)]  # tracked containers, as a kept fold's are
    try:
        clock.now += 5
        frozen.tick()
        assert gc.get_freeze_count() >= len(kept)
        clock.now += 60
        frozen.tick()
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()


class Loop(BackgroundLoop):
    """A loop whose passes apply nothing, and which stops itself after ``passes``."""

    def __init__(self, stop: threading.Event, passes: int):
        self._wake = threading.Event()
        self._stop, self._left = stop, passes

    def catch_up(self, **_: object) -> int:
        self._left -= 1
        if self._left == 0:
            self._stop.set()
        self._wake.set()  # no idle wait between the passes
        return 0

    def positions(self) -> dict[str, int]:
        return {}

    def mend_stale_tables(self) -> None:
        pass  # no read model to mend

    def report_lag(self, **_: object) -> None:
        pass

    def wake(self) -> None:
        self._wake.set()


def test_the_loop_ticks_its_freezer_before_each_pass():
    stop = threading.Event()
    ticks: list[int] = []

    class Counting(LongLivedFrozen):
        def tick(self) -> None:
            ticks.append(1)

    Loop(stop, passes=3).run_forever(stop, poll_s=0.01, frozen=Counting())
    assert len(ticks) == 3
