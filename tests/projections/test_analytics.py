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
        "on_server_uuid": SERVER, "claim_server_uuid": None, "released_server_uuid": None,
        # it was created, entering provisioning, at 0 ms
        "created": rfc3339(T0), "created_state": "provisioning",
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


class Shown:
    """Applies a timeline's new events step by step and checks, after each, that
    ``vm_current`` shows each VM's server as the VM object does (``Vm.shown_server_uuid``:
    GetVm, ListVms, the changes)."""

    def __init__(self, services, timeline: Timeline):
        self.services, self.timeline, self.applied = services, timeline, 0

    def at(self, ms: int, *vms: Vm) -> None:
        for vm in vms:
            self.timeline.at(ms, vm)
        apply(self.services, self.timeline.events[self.applied:])
        self.applied = len(self.timeline.events)
        for vm in vms:
            assert current(self.services, vm)["server_uuid"] == vm.shown_server_uuid


def test_a_vm_is_on_the_server_it_claimed_as_its_vm_object_shows_it(services):
    # found by a tester: a provision that failed on the server it had claimed was counted
    # on no server (/stats/failures?by=server), and a slow provision's VM, shown by GetVm
    # on its claimed server, was under null in /stats/states?by=server and /stats/stuck
    timeline = Timeline()
    shown = Shown(services, timeline)
    failing, slow, destroyed = new_vm(), new_vm(), new_vm()
    shown.at(0, failing, slow, destroyed)
    for vm in (failing, slow, destroyed):
        vm.claim_capacity(SERVER, cause=cause())
    shown.at(1_000, failing, slow, destroyed)
    assert [g["server_uuid"] for g in AnalyticsQueries(services.db).states_by("server_uuid")
            ] == [SERVER]
    # the failure gives the claim back before its ProvisionFailed, in the same save
    run_head_job(failing, lambda v: v.record_provision_failed("boom", cause=cause(),
                                                              copy_may_be_on=[]))
    queue(destroyed, Action.DESTROY)
    destroyed.record_destroyed(cause=cause())  # a destroy while provisioning: the same
    shown.at(2_000, failing, destroyed)
    assert failing.shown_server_uuid is destroyed.shown_server_uuid is None  # as GetVm shows
    assert [(r["vm_uuid"], r["event_type"], r["server_uuid"]) for r in rows(
        services, "vm_transitions", order_by="position")] == [
        (str(failing.id), "ProvisionFailed", SERVER), (str(destroyed.id), "Destroyed", SERVER)]
    assert AnalyticsQueries(services.db).failures("server_uuid") == [
        {"server_uuid": SERVER, "count": 1}]
    # the failed VM's destroy, later: it showed no server then
    queue(failing, Action.DESTROY)
    run_head_job(failing, lambda v: v.record_destroyed(cause=cause()))
    run_head_job(slow, lambda v: v.record_provisioned(SERVER, cause=cause()))
    shown.at(3_000, failing, slow)
    assert [r["server_uuid"] for r in rows(services, "vm_transitions", order_by="position")
            ][2:] == [None, SERVER]


def test_a_start_that_places_the_vm_anew_shows_its_old_server_until_it_runs(services):
    timeline = Timeline()
    shown = Shown(services, timeline)
    vm = new_vm()
    shown.at(0, vm)
    vm.claim_capacity(SERVER, cause=cause())
    run_head_job(vm, lambda v: v.record_provisioned(SERVER, cause=cause()))
    shown.at(1_000, vm)
    vm.record_failed("host_reboot", "its host rebooted", cause=cause())  # gives back its claim
    shown.at(2_000, vm)
    queue(vm, Action.START)
    vm.claim_capacity(OTHER_SERVER, cause=cause())
    shown.at(3_000, vm)
    assert current(services, vm)["server_uuid"] == SERVER
    run_head_job(vm, lambda v: v.record_started(cause=cause(), server_uuid=OTHER_SERVER))
    shown.at(4_000, vm)
    assert [r["server_uuid"] for r in rows(services, "vm_transitions", order_by="position")
            ] == [SERVER, SERVER, OTHER_SERVER]
    assert current(services, vm)["server_uuid"] == OTHER_SERVER


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
    failing = new_vm()  # a claim, and a failed provision that gives it back
    failing.claim_capacity(SERVER, cause=cause())
    run_head_job(failing, lambda v: v.record_provision_failed("boom", cause=cause(),
                                                              copy_may_be_on=[]))
    timeline.at(5_000, failing)
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
