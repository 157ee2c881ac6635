"""Where the tests find the Google trace shard (``VMLEDGER_TRACE``, else ``shared/data/``
beside the repository), and what a test that needs it does when it is missing: it skips with
the reason on a developer's machine, and fails under ``VMLEDGER_REQUIRE_TRACE=1`` (set by
``.ci/run``), so a missing file never passes CI as skipped tests."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
TRACE = Path(os.environ.get(
    "VMLEDGER_TRACE",
    REPO.parent / "shared" / "data" / "google2011_task_events_part-00000-of-00500.csv.gz",
))
REQUIRE_TRACE = os.environ.get("VMLEDGER_REQUIRE_TRACE") == "1"
MISSING = f"trace not found at {TRACE}; set VMLEDGER_TRACE to the task_events shard"


def needs_trace(test: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``test`` as needing the trace: unchanged when the file is there; else skipped,
    or failed when ``VMLEDGER_REQUIRE_TRACE=1``."""
    if TRACE.is_file():
        return test
    if not REQUIRE_TRACE:
        return pytest.mark.skip(reason=MISSING)(test)

    @functools.wraps(test)
    def missing(*args: Any, **kwargs: Any) -> None:
        pytest.fail(f"{MISSING} (VMLEDGER_REQUIRE_TRACE=1)")
    return missing
