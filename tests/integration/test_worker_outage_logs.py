"""``vmledger work`` through a database outage: its failed passes are logged as
``vmledger project`` logs its own (docs/operations.md, "Logs"): the first with its
traceback, then at most one line every 10 s counting those left out. Before, each pass
(every ~0.4 s) logged ERROR with a 55-line traceback: 10,000 lines in minutes."""

from __future__ import annotations

import logging
import threading
from urllib.parse import urlsplit

import pytest

from tests.waiting import wait_until
from tests.integration.outages import database_refused

# an outage run (.ci/slow.sh), left out of the default run
pytestmark = pytest.mark.slow


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_worker_logs_the_first_failed_pass_of_an_outage_with_its_traceback_then_no_more(
        services, database_url, monkeypatch, caplog):
    worker = services.worker
    failed: list[BaseException] = []

    def counted(call):
        def calling(*args, **kwargs):
            try:
                return call(*args, **kwargs)
            except Exception as error:
                failed.append(error)
                raise
        return calling

    for name in ("_run_periodic", "run_pending"):  # a pass's two steps
        monkeypatch.setattr(worker, name, counted(getattr(worker, name)))
    stop = threading.Event()
    running = threading.Thread(target=worker.run_forever, args=(stop, 0.01), daemon=True)
    with caplog.at_level(logging.ERROR, logger="vmledger"):
        running.start()
        try:
            with database_refused(urlsplit(database_url).path[1:]):
                wait_until(lambda: len(failed) >= 3, "three failed passes")
        finally:
            stop.set()
            running.join(10)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage().split(":")[0] for r in errors] == ["worker pass failed"]
    assert errors[0].exc_info is not None, "the first failure is logged with its traceback"
