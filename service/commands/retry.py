"""Retrying a command that met another writer's conflict (api.md, "Concurrency and
idempotency")."""

from __future__ import annotations

import random


def back_off_s(attempt: int) -> float:
    """How long to wait before the next attempt (s): a random few milliseconds, growing with
    ``attempt``, so writers that keep colliding on one stream stop moving in lockstep."""
    return random.uniform(0, 0.002 * 2 ** min(attempt, 6))


class ConflictRetriesExhaustedError(Exception):
    """Other writers kept winning; the client may retry (503)."""
