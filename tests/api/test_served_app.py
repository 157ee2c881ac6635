"""The app ``vmledger serve`` runs (``create_served_app``): the garbage collector's young
threshold raised, the process's long-lived objects frozen by a ``LongLivedFrozen`` that the
app's lifespan ticks, and log records that gather only what the lines show
(docs/performance.md, "The garbage collector")."""

from __future__ import annotations

import gc
import logging
import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient

from projections.collector import YOUNG_COLLECTION_EVERY, LongLivedFrozen
from service.api import app as app_module
from service.api.app import create_app, create_served_app


class CountingTicks(LongLivedFrozen):
    def __init__(self) -> None:
        super().__init__()
        self.ticked = threading.Event()

    def tick(self) -> None:
        self.ticked.set()


def test_the_lifespan_ticks_the_freezer_while_the_app_runs(services):
    frozen = CountingTicks()
    # on PostgreSQL no runner runs in this app: nothing may lag for /ping to answer 200
    services.projections.catch_up()
    with TestClient(create_app(services=services, frozen=frozen)) as http:
        assert http.get("/ping").status_code == 200
        assert frozen.ticked.wait(timeout=10), "no tick within 10 s (one a second expected)"


@pytest.mark.parametrize("frozen", [None, LongLivedFrozen()], ids=["tests'", "served"])
def test_only_an_app_given_a_freezer_starts_ticking_it(services, monkeypatch, frozen):
    started: list[LongLivedFrozen] = []

    async def recording(given: LongLivedFrozen) -> None:
        started.append(given)

    monkeypatch.setattr(app_module, "_tick_every_second", recording)
    services.projections.catch_up()  # as above
    with TestClient(create_app(services=services, frozen=frozen)) as http:
        assert http.get("/ping").status_code == 200
    assert started == ([] if frozen is None else [frozen])


def test_the_served_app_raises_the_young_threshold_freezes_and_gathers_less(monkeypatch):
    built: list[dict[str, Any]] = []
    monkeypatch.setattr(app_module, "create_app", lambda **kwargs: built.append(kwargs))
    thresholds = gc.get_threshold()
    try:
        create_served_app()
        assert gc.get_threshold() == (YOUNG_COLLECTION_EVERY, *thresholds[1:])
    finally:
        gc.set_threshold(*thresholds)
    assert len(built) == 1 and isinstance(built[0]["frozen"], LongLivedFrozen)
    record = logging.makeLogRecord({})
    assert (record.threadName, record.process, logging._srcfile) == (None, None, None)
