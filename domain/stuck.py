"""When a VM is stuck: in a transient state, or under a job, for longer than the operator
allows (design.md, lesson 3, Nova's "delete in BUILD"). A stuck VM is quarantined: taken from
its owner into the operator quarantine, with its whole history, instead of being lost or
blocking its owner."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from domain.states import TRANSIENT_STATES, Execution, VmState


@dataclass(frozen=True)
class StuckThresholds:
    """How long is too long (seconds)."""

    transient_s: float = 3600.0  # in ``provisioning``
    job_s: float = 3600.0  # a job running since its first start


def stuck_reason(vm: Any, now: datetime, thresholds: StuckThresholds) -> str | None:
    """Why ``vm`` is stuck at ``now``, or None if it is not."""
    state = VmState(vm.state)
    if state in TRANSIENT_STATES and now - vm.created_on > timedelta(seconds=thresholds.transient_s):
        return (f"stuck in {state.value} since {vm.created_on.isoformat()} "
                f"(more than {thresholds.transient_s:g} s)")
    head = vm.head_job
    if head is not None and head["execution"] == Execution.RUNNING and head.get("started_at"):
        started = datetime.fromisoformat(head["started_at"])
        if now - started > timedelta(seconds=thresholds.job_s):
            return (f"job {head['uuid']} ({head['name']}) running since {started.isoformat()} "
                    f"(more than {thresholds.job_s:g} s)")
    return None
