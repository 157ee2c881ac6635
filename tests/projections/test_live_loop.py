"""The runner's background loop keeps the positions its own commits reached between passes
(docs/performance.md, P5): stale ones (a rival's commit, a reset) must be refused, never
applied from, so that no event is skipped or applied twice."""

from __future__ import annotations

import threading

import pytest

from domain.states import Action
from projections.live import LiveState
from projections.tracking import ProjectionConflictError
from tests.builders import act, create, rows
from tests.projections.test_runner import VIEWS, second_runner, snapshot
from tests.waiting import wait_until


def rebuilt_from_scratch(services) -> dict[str, object]:
    """What one runner applying the whole log from position 0 gives."""
    services.projections.reset(VIEWS)
    second_runner(services).catch_up()
    return snapshot(services)


class Loops:
    """``count`` runners' background loops in threads, as in as many ``project`` processes."""

    def __init__(self, services, count: int, *, batch_size: int = 2, poll_s: float = 0.01):
        self.runners = [second_runner(services, batch_size=batch_size) for _ in range(count)]
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=r.run_forever, args=(self.stop, poll_s,
                                                                        self.errors.append))
                        for r in self.runners]

    def __enter__(self) -> Loops:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        for runner in self.runners:
            runner.wake()  # out of a long poll's wait
        for thread in self.threads:
            thread.join(30)

    def caught_up(self, services, timeout: float = 30) -> bool:
        head = services.commands.head_position()
        return self.runners[0].wait_for(head, VIEWS, timeout=timeout)


def test_two_loops_racing_with_appends_give_the_rows_one_runner_gives(services):
    vms = [create(services).vm_uuid for _ in range(3)]
    with Loops(services, 2) as loops:
        for vm_uuid in vms:  # appended while both loops apply, in batches of 2
            for action in (Action.STOP, Action.START, Action.REBOOT):
                act(services, vm_uuid, action)
                for runner in loops.runners:
                    runner.wake()
        assert loops.caught_up(services)
    assert not any(t.is_alive() for t in loops.threads)
    assert not loops.errors
    live = snapshot(services)
    assert rebuilt_from_scratch(services) == live


def test_a_loop_notices_a_reset_made_while_it_ran_and_applies_everything_again(services):
    create(services)
    with Loops(services, 1) as loops:
        assert loops.caught_up(services)
        expected = snapshot(services)
        services.projections.reset(VIEWS)  # e.g. `vmledger rebuild` of a model in place
        assert loops.caught_up(services)  # read again when idle: no append needed
        assert snapshot(services) == expected
        create(services)
        loops.runners[0].wake()
        assert loops.caught_up(services)
    assert not loops.errors
    live = snapshot(services)
    assert rebuilt_from_scratch(services) == live


def test_a_reset_is_seen_while_waiters_keep_waking_the_loop(services):
    # The loop never waits out its poll here: wait_for wakes it every few milliseconds, as
    # read-your-writes waiters do. A reset with no append after it must still be seen.
    create(services)
    with Loops(services, 1, poll_s=3600) as loops:
        assert loops.caught_up(services)
        expected = snapshot(services)
        services.projections.reset(VIEWS)
        assert loops.caught_up(services, timeout=10)
        assert snapshot(services) == expected
    assert not loops.errors


def test_positions_kept_from_before_a_reset_are_refused_and_change_nothing(services):
    create(services)
    services.projections.catch_up()
    kept = services.projections.positions()  # what a background loop remembers
    services.projections.reset(VIEWS)
    create(services)  # an append after the reset: the kept positions find events to apply
    before = snapshot(services)
    runner = second_runner(services)
    with pytest.raises(ProjectionConflictError):
        runner.catch_up(live=LiveState(positions=dict(kept)))
    assert snapshot(services) == before


def test_a_runner_refused_by_a_rival_again_and_again_reads_and_applies_without_errors(services):
    # Its position reads (read-only pipelined transactions) and refused batches share pooled
    # connections: a ROLLBACK statement ending the reads made psycopg forget its prepared
    # statements one statement too late ("prepared statement ... does not exist").
    winner, loser = second_runner(services, batch_size=2), second_runner(services, batch_size=2)
    for _ in range(15):
        act(services, create(services).vm_uuid, Action.STOP)
        stale = loser.positions()
        winner.positions()
        winner.catch_up()
        with pytest.raises(ProjectionConflictError):
            loser.catch_up(live=LiveState(positions=dict(stale)))
    loser.catch_up()
    assert loser.positions() == winner.positions()
    assert rebuilt_from_scratch(services) == snapshot(services)


def test_a_read_ahead_kept_from_before_a_rivals_commit_is_refused_and_changes_nothing(services):
    create(services)
    services.projections.catch_up()
    kept = services.projections.positions()
    start = kept["vm_view"]
    act(services, rows(services, "vm_view")[0]["uuid"], Action.STOP)
    ahead = services.app.recorder.select_notifications(start, 500, inclusive_of_start=False)
    live = LiveState(positions=dict(kept), ahead_at=start, ahead=ahead)
    services.projections.catch_up()  # a rival applies those events first
    before = snapshot(services)
    with pytest.raises(ProjectionConflictError):
        second_runner(services).catch_up(live=live)
    assert snapshot(services) == before


class AppendsRightAfterReadingAhead:
    """The log, as a loop reading ahead sees it, with a command appended (and its wake-up
    sent, as its NOTIFY would be) just after each of the first ``count`` reads ahead."""

    def __init__(self, services, vms: list[str]):
        self.services, self.vms, self.loop = services, vms, None
        self.recorder = services.app.recorder

    def select_notifications(self, *args, **kwargs):
        return self.recorder.select_notifications(*args, **kwargs)

    def max_notification_id(self):
        return self.recorder.max_notification_id()

    def submit_notifications(self, tx, after, limit):
        answer = self.recorder.submit_notifications(tx, after, limit)

        def then_append():
            found = answer()
            if self.vms:
                act(self.services, self.vms.pop(), Action.STOP)
                self.loop.wake()
            return found
        return then_append


def wait_reached(services, position: int) -> None:
    """Wait until vm_view reaches ``position``, read without waking anyone."""
    wait_until(lambda: services.projections.positions()["vm_view"] >= position,
               f"vm_view to reach position {position}", timeout=10)


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)  # reads ahead there
def test_a_wake_up_sent_during_a_pass_is_kept_so_its_append_is_applied_without_the_poll(
    services,
):
    vms = [create(services).vm_uuid for _ in range(3)]
    source = AppendsRightAfterReadingAhead(services, list(vms))
    loop = source.loop = second_runner(services, source)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run_forever, args=(stop, 3600))
    thread.start()
    try:  # each append is made and seen only if its wake-up, sent after the read ahead, is kept
        wait_until(lambda: not source.vms, "every append to be made", timeout=10)
        wait_reached(services, services.commands.head_position())
    finally:
        stop.set()
        loop.wake()
        thread.join(30)
    assert not thread.is_alive()
    assert rebuilt_from_scratch(services) == snapshot(services)


class CountedReads:
    """The event store's recorder, counting the log reads made outside a batch's transaction
    (``select_notifications``); a read ahead goes through ``submit_notifications``."""

    def __init__(self, recorder):
        self.recorder, self.reads = recorder, 0

    def select_notifications(self, *args, **kwargs):
        self.reads += 1
        return self.recorder.select_notifications(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.recorder, name)


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)  # reads ahead there
def test_a_live_pass_over_many_batches_reads_the_log_once_the_rest_read_ahead(services):
    for _ in range(3):
        act(services, create(services).vm_uuid, Action.STOP)  # 3 VMs' events: many batches
    source = CountedReads(services.app.recorder)
    runner = second_runner(services, source, batch_size=2)
    runner.reset(VIEWS)
    head = services.commands.head_position()
    live = LiveState()
    runner.catch_up(live=live)
    assert runner.position("vm_view") == head > 4
    assert source.reads == 1  # the first batch's; every later one came with a commit
    assert rebuilt_from_scratch(services) == snapshot(services)
