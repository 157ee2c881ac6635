"""API fixtures beyond tests/conftest.py: an app whose job worker is paused, so a test can
catch a VM in a transient state (still provisioning, a job still queued) deterministically;
and the API of a second process on the same database (``restarted``), with nothing cached."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.container import Services
from tests.api.conformance import conforming


@dataclass
class PausedWorker:
    """The API over ``services`` with the projection runner running and the job worker not:
    jobs run only when the test calls ``run_jobs``."""

    http: TestClient
    services: Services

    def run_jobs(self) -> int:
        """Run every job that is due (in queue order, per VM); returns how many ran."""
        services = self.services
        assert services.projections.wait_for(
            services.commands.head_position(), ("job_view",), timeout=10)
        return services.worker.run_pending()


@pytest.fixture
def paused(services: Services) -> Iterator[PausedWorker]:
    """An HTTP client over ``services`` whose job worker runs only when asked."""
    app = create_app(services=services, background=False)
    with conforming(TestClient(app)) as http:
        services.start_background(projections=True, worker=False)
        yield PausedWorker(http, services)


@pytest.fixture
def restarted(settings) -> Iterator[TestClient]:
    """The API of a new process on the same database: nothing of the stream cached."""
    services = Services.build(settings)
    try:
        with conforming(TestClient(create_app(services=services, background=False))) as http:
            yield http
    finally:
        services.close()
