"""When a VM is stuck: in a transient state, or under a job, for longer than the operator
allows (design.md, lesson 3, Nova's "delete in BUILD"). A stuck VM is quarantined: taken from
its owner into the operator quarantine, with its whole history, instead of being lost or
blocking its owner."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from domain.instants import rfc3339
from domain.states import TRANSIENT_STATES, Execution, VmState


@dataclass(frozen=True)
class StuckThresholds:
    """How long is too long (seconds)."""

    transient_s: float = 3600.0  # in ``provisioning``
    job_s: float = 3600.0  # a job running since its first start


def starts_anew(before: str, after: str) -> bool:
    """Whether a transition from state ``before`` to ``after`` starts the VM's time in its
    state anew: only a change of state does (a reboot stays running and its time goes on; a
    ``Released`` back into ``provisioning`` starts it again). The one rule of "in its state
    since" for the domain (``Vm.state_since``, which this check reads) and the read model
    (``vm_current.since``, which ``/stats/stuck`` reads), so the two never disagree."""
    return VmState(after) is not VmState(before)


def in_state_since(vm: Any) -> datetime:
    """When ``vm`` entered its state: the event that last changed it (``Vm.state_since``;
    its creation for a VM folded from a snapshot taken before that was kept)."""
    return vm.state_since or vm.created_on


def stuck_reason(vm: Any, now: datetime, thresholds: StuckThresholds) -> str | None:
    """Why ``vm`` is stuck at ``now``, or None if it is not. A transient state is timed from
    when the VM entered it (``in_state_since``), so a VM given back from the quarantine still
    provisioning has its full time again, as ``/stats/stuck`` counts it. Instants are
    written as the API writes them (``domain.instants.rfc3339``: ``…T07:22:21.934Z``)."""
    state = VmState(vm.state)
    since = in_state_since(vm)
    if state in TRANSIENT_STATES and now - since > timedelta(seconds=thresholds.transient_s):
        return (f"stuck in {state.value} since {rfc3339(since)} "
                f"(more than {thresholds.transient_s:g} s)")
    head = vm.head_job
    if head is not None and head["execution"] == Execution.RUNNING and head.get("started_at"):
        started = datetime.fromisoformat(head["started_at"])
        if now - started > timedelta(seconds=thresholds.job_s):
            return (f"job {head['uuid']} ({head['name']}) running since {rfc3339(started)} "
                    f"(more than {thresholds.job_s:g} s)")
    return None
