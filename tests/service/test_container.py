"""Building a process's objects (service/container.py)."""

from __future__ import annotations

from service.container import Services
from service.settings import Settings


def test_a_process_that_runs_no_projection_runner_publishes_no_lag(tmp_path):
    # Found by a new-user test: the first process on a new database registers the simulated
    # servers and caught server_view up, which published every read model's lag once; in a
    # `vmledger work` process that figure never moved again.
    from prometheus_client import REGISTRY

    from service.metrics import PROJECTION_LAG

    PROJECTION_LAG.clear()
    services = Services.build(Settings(database_url=f"sqlite:///{tmp_path / 'vmledger.db'}", sim_servers=1))
    try:
        assert services.servers.list()  # the servers were registered and projected
    finally:
        services.close()
    assert REGISTRY.get_sample_value("vmledger_projection_lag_events",
                                     {"read_model": "vm_view"}) is None


def test_the_embedded_projection_runner_logs_a_failing_pass_once_per_interval(tmp_path, caplog):
    # found by a tester: `serve`'s own runner logged every failed pass, about 20 lines a
    # second, where `vmledger project` logs one line every 10 s
    import logging
    import threading

    services = Services.build(Settings(database_url=f"sqlite:///{tmp_path / 'vmledger.db'}",
                                       sim_servers=1, projection_poll_s=0.001))
    failures, failed = [0], threading.Condition()

    def failing_pass(**_kwargs: object) -> int:
        with failed:
            failures[0] += 1
            failed.notify_all()
        raise RuntimeError("no such table: vm_current")

    services.projections.catch_up = failing_pass  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.ERROR, logger="vmledger.service.container"):
            services.start_background(worker=False)
            with failed:
                assert failed.wait_for(lambda: failures[0] >= 20, timeout=10)
    finally:
        services.close()
    lines = [r for r in caplog.records if "projection pass failed" in r.getMessage()]
    assert len(lines) == 1 and "no such table: vm_current" in lines[0].getMessage()
