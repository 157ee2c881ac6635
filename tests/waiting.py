"""Waiting on a condition, not sleeping: the one polling helper of the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str = "the condition", *,
               timeout: float = 30.0, interval: float = 0.01,
               log_path: str | Path | None = None) -> T:
    """Poll ``condition`` every ``interval`` s until it returns something truthy, and return
    that. After ``timeout`` s fail naming ``what``, with the tail of the log at ``log_path``
    when the condition waits on processes that write one."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            tail = f"; log:\n{Path(log_path).read_text()[-4000:]}" if log_path else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{tail}")
        time.sleep(interval)
    return value
