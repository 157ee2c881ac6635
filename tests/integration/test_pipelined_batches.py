"""Read-model batches on PostgreSQL run in pipeline mode (statements sent without waiting for
their results). A bug found by bench/p3_rebuild.py: with one cursor shared by a batch's
statements, an earlier statement's result could reach the cursor after a later statement was
sent, and the later fetch read it ("the last operation didn't produce records", or worse, the
wrong rows). It took a log big enough that the server flushed results mid-batch (20,000
events of cloned VM lives), so the test builds one with the benchmark's own log builder."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from service.container import Services
from service.settings import Settings
from tests.builders import rows

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _log import build_log  # noqa: E402 - the benchmark's realistic log of any size


@pytest.mark.slow  # a long run over a large log (.ci/slow.sh)
def test_a_rebuild_over_a_large_log_on_postgresql_equals_the_live_read_models(postgres_url):
    from tests.conftest import _empty_schema

    _empty_schema(postgres_url)
    settings = Settings(database_url=postgres_url)
    with _services(settings) as services:
        assert build_log(services, 25_000)["head"] >= 25_000
    with _services(settings) as services:  # a new process, as `vmledger rebuild` is
        assert services.projections.rebuild() == (
            len(services.projections.read_models) * services.projections.head())
        rebuilt = _tables(services)
        services.projections.reset(services.projections.read_models)
        services.projections.catch_up()
        assert _tables(services) == rebuilt


TABLES = (("vm_view", "uuid"), ("job_view", "uuid"), ("vm_transitions", "position"))


def _tables(services: Services) -> dict[str, list[dict]]:
    return {table: rows(services, table, order_by=order) for table, order in TABLES}


@contextmanager
def _services(settings: Settings) -> Iterator[Services]:
    services = Services.build(settings)
    try:
        yield services
    finally:
        services.close()
