"""The garbage collector's settings (projections/collector.py): young collections ten times
rarer in vmledger's own processes and for the length of a rebuild, and put back after it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from projections.collector import (
    YOUNG_COLLECTION_EVERY, collect_young_less_often, fewer_young_collections,
)
from tests.builders import create


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield gc.get_threshold()
    finally:
        gc.set_threshold(*before)


def test_a_process_of_ours_collects_young_garbage_less_often(thresholds):
    collect_young_less_often()
    assert gc.get_threshold() == (YOUNG_COLLECTION_EVERY, 10, 10)


def test_the_thresholds_are_put_back_after_the_work_even_when_it_fails(thresholds):
    with pytest.raises(RuntimeError), fewer_young_collections():
        assert gc.get_threshold() == (YOUNG_COLLECTION_EVERY, 10, 10)
        raise RuntimeError("the work failed")
    assert gc.get_threshold() == thresholds


def test_a_higher_threshold_already_set_is_kept(thresholds):
    gc.set_threshold(50_000, 10, 10)
    with fewer_young_collections():
        assert gc.get_threshold()[0] == 50_000


def test_a_rebuild_applies_the_log_with_fewer_young_collections(services, thresholds,
                                                               monkeypatch):
    create(services)
    runner = services.projections
    seen: list[int] = []
    catch_up = runner.catch_up_models

    def recording(*args, **kwargs):
        seen.append(gc.get_threshold()[0])
        return catch_up(*args, **kwargs)

    monkeypatch.setattr(runner, "catch_up_models", recording)
    assert runner.rebuild() > 0
    assert seen == [YOUNG_COLLECTION_EVERY]
    assert gc.get_threshold() == thresholds
