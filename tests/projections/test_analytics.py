"""``analytics``: state changes in, ``vm_transitions`` and ``vm_current`` rows out, with the
time spent in each state measured from the events' own timestamps; percentiles and durations
as ``/stats`` computes them."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from domain.errors import IllegalTransitionError
from domain.states import Action
from domain.vm import QUARANTINE_OWNER_UUID, Vm
from projections.analytics import AnalyticsView, epoch_ms
from projections.analytics_queries import AnalyticsQueries, durations_between, nearest_rank
from projections.formats import rfc3339
from tests.builders import OWNER, T0, cause, new_vm, queue, rows, run_head_job

SERVER = "0d3f4b6e-0000-4000-8000-0000000000aa"
OTHER_SERVER = "0d3f4b6e-0000-4000-8000-0000000000bb"


class Timeline:
    """Events of in-memory VMs, each step stamped at a chosen instant (ms after ``T0``), in
    log order with positions from 1."""

    def __init__(self) -> None:
        self.events: list[tuple[int, Any]] = []

    def at(self, ms: int, vm: Vm) -> None:
        """Take ``vm``'s pending events as having happened ``ms`` after ``T0``."""
        moment = T0 + timedelta(milliseconds=ms)
        for event in vm.collect_events():
            self.events.append((len(self.events) + 1,
                                dataclasses.replace(event, timestamp=moment)))


def apply(services, events: list[tuple[int, Any]], batch: int | None = None) -> None:
    """Feed ``events`` to an AnalyticsView as the runner would, ``batch`` at a time."""
    view = AnalyticsView()
    size = batch or len(events) or 1
    for start in range(0, len(events), size):
        with services.db.transaction() as tx:
            view.apply(tx, events[start:start + size])


def transitions(services) -> list[tuple[Any, ...]]:
    """(event_type, from_state, to_state, ms_in_from, server_uuid, reason) in log order."""
    return [(r["event_type"], r["from_state"], r["to_state"], r["ms_in_from"], r["server_uuid"],
             r["reason"]) for r in rows(services, "vm_transitions", order_by="position")]


def current(services, vm: Vm) -> dict[str, Any]:
    [row] = [r for r in rows(services, "vm_current", order_by="vm_uuid")
             if r["vm_uuid"] == str(vm.id)]
    return row


def provisioned(timeline: Timeline, at_ms: int, server: str = SERVER) -> Vm:
    """A VM created at 0 ms and provisioned on ``server`` at ``at_ms``."""
    vm = new_vm()
    timeline.at(0, vm)
    run_head_job(vm, lambda v: v.record_provisioned(server, cause=cause()))
    timeline.at(at_ms, vm)
    return vm


def test_each_state_change_is_one_row_with_the_time_spent_in_the_state_it_left(services):
    timeline = Timeline()
    vm = provisioned(timeline, 1_500)
    queue(vm, Action.REBOOT)
    run_head_job(vm, lambda v: v.record_rebooted(cause=cause()))
    timeline.at(10_000, vm)
    queue(vm, Action.STOP)
    run_head_job(vm, lambda v: v.record_stopped(cause=cause()))
    timeline.at(60_000, vm)
    queue(vm, Action.START)
    run_head_job(vm, lambda v: v.record_started(cause=cause()))
    timeline.at(70_000, vm)
    queue(vm, Action.DESTROY)
    run_head_job(vm, lambda v: v.record_destroyed(cause=cause()))
    timeline.at(100_000, vm)
    apply(services, timeline.events)

    assert transitions(services) == [
        ("Provisioned", "provisioning", "running", 1_500, SERVER, None),
        # a reboot is a transition running -> running, but the VM stays in running...
        ("Rebooted", "running", "running", 8_500, SERVER, None),
        # ...so the time in running is counted from when it entered it, not from the reboot
        ("Stopped", "running", "stopped", 58_500, SERVER, None),
        ("Started", "stopped", "running", 10_000, SERVER, None),
        ("Destroyed", "running", "destroyed", 30_000, SERVER, None),
    ]
    first = rows(services, "vm_transitions", order_by="position")[0]
    provisioned_at = T0 + timedelta(milliseconds=1_500)
    assert (first["vm_uuid"], first["owner_uuid"]) == (str(vm.id), OWNER)
    assert (first["at"], first["at_ms"]) == (rfc3339(provisioned_at), epoch_ms(provisioned_at))
    assert first["at"] == "2026-01-01T00:00:01.500Z"
    assert first["version"] == 4 and first["position"] == 4  # Created, JobQueued, JobStarted
    assert first["actor"] == "test"
    destroyed_at = T0 + timedelta(milliseconds=100_000)
    [(position, destroyed)] = [(p, e) for p, e in timeline.events if isinstance(e, Vm.Destroyed)]
    assert current(services, vm) == {
        "vm_uuid": str(vm.id), "state": "destroyed", "since": rfc3339(destroyed_at),
        "since_ms": epoch_ms(destroyed_at), "owner_uuid": OWNER, "server_uuid": SERVER,
        "quarantined_from": None, "version": destroyed.originator_version, "position": position,
    }


def test_failures_record_their_reason_message_and_the_server_they_happened_on(services):
    timeline = Timeline()
    never_placed = new_vm()
    timeline.at(0, never_placed)
    run_head_job(never_placed,
                 lambda v: v.record_provision_failed("no server has room", cause=cause(),
                                                     copy_may_be_on=[]))
    timeline.at(2_000, never_placed)
    evicted = provisioned(timeline, 1_000)
    evicted.record_failed("evicted", "host took it away", cause=cause())
    timeline.at(5_000, evicted)
    queue(evicted, Action.START)
    run_head_job(evicted, lambda v: v.record_started(cause=cause(), server_uuid=OTHER_SERVER))
    timeline.at(9_000, evicted)
    apply(services, timeline.events)

    failures = [(r["reason"], r["message"], r["server_uuid"], r["ms_in_from"])
                for r in rows(services, "vm_transitions", order_by="position")
                if r["to_state"] == "failed"]
    assert failures == [("provision_failed", "no server has room", None, 2_000),
                        ("evicted", "host took it away", SERVER, 4_000)]
    restart = rows(services, "vm_transitions", order_by="position")[-1]
    assert (restart["from_state"], restart["to_state"], restart["server_uuid"],
            restart["ms_in_from"]) == ("failed", "running", OTHER_SERVER, 4_000)
    assert current(services, evicted)["server_uuid"] == OTHER_SERVER
    assert current(services, never_placed)["state"] == "failed"


def test_a_quarantined_vm_keeps_its_owner_and_is_released_to_the_state_it_had(services):
    timeline = Timeline()
    vm = provisioned(timeline, 1_000)
    vm.record_quarantined("stuck", cause=cause())
    timeline.at(3_000, vm)
    assert vm.owner_uuid == QUARANTINE_OWNER_UUID  # the aggregate hands it to the operator...
    apply(services, timeline.events)
    assert current(services, vm)["owner_uuid"] == OWNER  # ...the analysts count it as OWNER's
    assert current(services, vm)["quarantined_from"] == "running"

    vm.record_released(cause=cause())
    timeline.at(7_000, vm)
    apply(services, timeline.events[-1:])
    assert transitions(services)[-2:] == [
        ("Quarantined", "running", "quarantined", 2_000, SERVER, "stuck"),
        ("Released", "quarantined", "running", 4_000, SERVER, None),
    ]
    assert {r["owner_uuid"] for r in rows(services, "vm_transitions", order_by="position")} == {
        OWNER}
    assert (current(services, vm)["state"], current(services, vm)["quarantined_from"]) == (
        "running", None)


def test_a_release_back_into_failed_is_no_failure_by_reason_or_by_server(services):
    timeline = Timeline()
    crashed = provisioned(timeline, 1_000)
    crashed.record_failed("crashed", "the guest died", cause=cause())
    timeline.at(2_000, crashed)
    crashed.record_quarantined("look", cause=cause())
    timeline.at(3_000, crashed)
    crashed.record_released(cause=cause())  # back into failed: a transition, not a failure
    timeline.at(4_000, crashed)
    apply(services, timeline.events)
    assert transitions(services)[-1][:3] == ("Released", "quarantined", "failed")
    queries = AnalyticsQueries(services.db)
    assert queries.failures("reason") == [{"reason": "crashed", "count": 1}]
    assert queries.failures("server_uuid") == [{"server_uuid": SERVER, "count": 1}]


def test_one_event_per_batch_gives_the_same_rows_as_one_batch(services):
    timeline = Timeline()
    vms = [provisioned(timeline, 1_000 + n) for n in range(3)]
    vms[0].record_failed("crashed", "guest died", cause=cause())
    timeline.at(4_000, vms[0])
    apply(services, timeline.events)
    together = {t: rows(services, t, order_by="vm_uuid") for t in AnalyticsView.tables}
    with services.db.transaction() as tx:
        for table in AnalyticsView.tables:
            tx.execute(f"DELETE FROM {table}")
    apply(services, timeline.events, batch=1)
    assert {t: rows(services, t, order_by="vm_uuid") for t in AnalyticsView.tables} == together


def test_a_state_change_the_stored_state_does_not_allow_fails_loudly(services):
    timeline = Timeline()
    vm = provisioned(timeline, 1_000)
    apply(services, timeline.events[:2])  # Created and JobQueued only: Provisioned is missed
    vm.record_failed("crashed", "guest died", cause=cause())
    timeline.at(2_000, vm)
    with pytest.raises(IllegalTransitionError):
        apply(services, timeline.events[-1:])  # Failed from "provisioning" is impossible


def test_a_state_change_of_an_unknown_vm_fails_loudly(services):
    timeline = Timeline()
    provisioned(timeline, 1_000)
    with pytest.raises(LookupError, match="missed"):
        apply(services, timeline.events[2:])  # Created was never applied


def test_nearest_rank_percentiles():
    hundred = list(range(1, 101))
    assert [nearest_rank(hundred, p) for p in (50, 90, 99, 100)] == [50, 90, 99, 100]
    ten = list(range(10, 101, 10))
    assert [nearest_rank(ten, p) for p in (50, 90, 99)] == [50, 90, 100]
    assert nearest_rank([7], 50) == nearest_rank([7], 99) == 7
    assert nearest_rank([], 50) is None


def row(vm: str, from_state: str, to_state: str, at_ms: int, ms_in_from: int) -> dict[str, Any]:
    return {"vm_uuid": vm, "from_state": from_state, "to_state": to_state, "at_ms": at_ms,
            "ms_in_from": ms_in_from}


def test_durations_pair_each_entry_into_to_with_the_latest_entry_into_from():
    rows_ = [
        # a: provisioning (0) -> running (100): measured directly
        row("a", "provisioning", "running", 100, 100),
        # a: running -> stopped -> running again: no new entry into provisioning, not measured
        row("a", "running", "stopped", 500, 400),
        row("a", "stopped", "running", 700, 200),
        # b: provisioning (0) -> failed (50) -> running (80): 80 from entering provisioning
        row("b", "provisioning", "failed", 50, 50),
        row("b", "failed", "running", 80, 30),
        # c: never reaches running
        row("c", "provisioning", "failed", 10, 10),
    ]
    selected = [r for r in rows_ if r["from_state"] == "provisioning" or r["to_state"] == "running"]
    assert durations_between(selected, "provisioning", "running") == [100, 80]
    # running -> stopped: a entered running at 100 and stopped at 500
    assert durations_between(rows_, "running", "stopped") == [400]
    # failed -> running: b only (c stays failed)
    assert durations_between(rows_, "failed", "running") == [30]
