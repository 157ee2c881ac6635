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
