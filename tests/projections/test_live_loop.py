"""The runner's background loop keeps the positions its own commits reached between passes
(docs/performance.md, P5): stale ones (a rival's commit, a reset) must be refused, never
applied from, so that no event is skipped or applied twice."""

from __future__ import annotations

import threading

import pytest

from domain.states import Action
from projections.runner import ProjectionConflictError
from tests.builders import act, create
from tests.projections.test_runner import VIEWS, second_runner, snapshot


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
        runner.catch_up_models(list(runner.read_models.values()), positions=dict(kept))
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
            loser.catch_up_models(list(loser.read_models.values()), positions=dict(stale))
    loser.catch_up()
    assert loser.positions() == winner.positions()
    assert rebuilt_from_scratch(services) == snapshot(services)
