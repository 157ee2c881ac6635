"""Transient database errors inside a job: retried with back-off (``service.db_retry``)
while the job's lease holds (docs/jobs.md, "Database errors inside a job").

The job's steps are idempotent and every save re-checks the ticket, so doing a call again is
safe. Given up only when the lease is about to run out, so a worker never acts on a job
another worker may already have taken over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.db_retry import retry_transient


class PatientDriver:
    """A compute driver whose every call is retried through transient database errors (the
    simulated fleet keeps its world in the database; a real driver's own errors are
    ``ComputeError`` and pass through)."""

    def __init__(self, driver: Any, until: Callable[[], float]):
        self._driver = driver
        self._until = until

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._driver, name)
        if not callable(attribute):
            return attribute

        def patient(*args: Any, **kwargs: Any) -> Any:
            # looked up again on each try, as a caller without this wrapper would
            return retry_transient(lambda: getattr(self._driver, name)(*args, **kwargs),
                                   until=self._until, what=f"compute call {name}")

        return patient
