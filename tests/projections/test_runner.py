"""The projection runner: tracking moves with the rows in one transaction, two runners never
both apply a batch, rebuilds replay from position 1, and ``wait_for`` waits on a condition."""

from __future__ import annotations

import copy
import threading

import pytest

from domain.states import Action
from projections.job_view import JobView
from projections.rebuild import prepare
from projections.runner import ProjectionRunner
from projections.tracking import ProjectionConflictError
from projections.vm_view import VmView
from tests.builders import a_mix_of_commands_and_jobs, act, cause, create, rows, settle

VIEWS = ("vm_view", "job_view")


def snapshot(services) -> dict[str, object]:
    """Every read-model row and every tracking position."""
    return {
        "vm_view": rows(services, "vm_view"),
        "job_view": rows(services, "job_view"),
        "tracking": rows(services, "projection_tracking", order_by="name"),
    }


def second_runner(services, source=None, *, batch_size: int = 500) -> ProjectionRunner:
    """Another runner over the same database (as in a second ``vmledger project`` process)."""
    return ProjectionRunner(
        services.db, source or services.app.recorder, services.app.mapper,
        [VmView(services.app.mapper.transcoder), JobView()], batch_size=batch_size,
    )


class RacedSource:
    """The log as a runner sees it, with another runner winning right after the read."""

    def __init__(self, recorder, rival):
        self.recorder = recorder
        self.rival = rival

    def select_notifications(self, *args, **kwargs):
        notifications = self.recorder.select_notifications(*args, **kwargs)
        self.rival()
        return notifications

    def max_notification_id(self):
        return self.recorder.max_notification_id()


def test_catch_up_applies_every_event_and_records_the_head_position(services):
    create(services)
    create(services)
    before = services.projections.positions()
    assert before["vm_view"] == before["job_view"] == 0
    applied = services.projections.catch_up()
    head = services.commands.head_position()
    # every event not yet applied, applied to each read model
    assert applied == sum(head - position for position in before.values())
    assert set(services.projections.positions().values()) == {head}
    assert len(rows(services, "vm_view")) == 2 and len(rows(services, "job_view")) == 2
    assert services.projections.catch_up() == 0


def test_small_batches_give_the_same_rows_as_one_big_batch(services):
    a_mix_of_commands_and_jobs(services)
    live = snapshot(services)
    services.projections.reset(VIEWS)
    runner = second_runner(services, batch_size=3)
    runner.catch_up()
    assert snapshot(services) == live


@pytest.mark.parametrize("rebuild_batch_size", [3, 10_000])
def test_a_rebuild_equals_the_live_read_models_row_for_row(services, rebuild_batch_size):
    a_mix_of_commands_and_jobs(services)
    live = snapshot(services)
    assert live["vm_view"] and live["job_view"]
    services.projections.rebuild_batch_size = rebuild_batch_size  # many batches, or one
    services.projections.rebuild()
    assert snapshot(services) == live


def test_a_failure_inside_apply_moves_neither_rows_nor_position(services, monkeypatch):
    create(services)
    services.projections.catch_up()
    create(services)
    act(services, rows(services, "vm_view")[0]["uuid"], Action.STOP)
    before = snapshot(services)
    view = services.projections.read_models["vm_view"]
    real_write = view.write

    def write_then_crash(tx, events, stored):
        real_write(tx, events, stored)  # the rows are written in this transaction...
        raise RuntimeError("crash after writing rows")  # ...and then the process "dies"

    monkeypatch.setattr(view, "write", write_then_crash)
    with pytest.raises(RuntimeError, match="crash"):
        services.projections.run_once("vm_view")
    assert snapshot(services) == before
    monkeypatch.undo()
    services.projections.catch_up()
    assert services.projections.position("vm_view") == services.commands.head_position()


def rival(services, view: str, seen: list, *, batch_size: int = 500):
    """Another runner applying ``view``'s next batch (up to ``batch_size`` events); what the
    read models look like right after it committed is appended to ``seen``."""
    winner = second_runner(services, batch_size=batch_size)

    def win() -> None:
        winner.run_once(view)
        seen.append(snapshot(services))

    return win


@pytest.mark.parametrize("view", VIEWS)
def test_a_second_runner_applying_the_same_batch_is_refused_and_changes_nothing(services, view):
    create(services)
    services.projections.catch_up()
    vm_uuid = create(services).vm_uuid
    act(services, vm_uuid, Action.STOP)
    seen: list = []
    loser = second_runner(services, RacedSource(services.app.recorder, rival(services, view, seen)))
    with pytest.raises(ProjectionConflictError):
        loser.run_once(view)
    [after_the_winner] = seen
    assert snapshot(services) == after_the_winner
    assert services.projections.position(view) == services.commands.head_position()


@pytest.mark.parametrize("view", VIEWS)
def test_a_runner_with_a_stale_position_is_refused_even_when_its_batch_reaches_further(
    services, view
):
    vm_uuid = create(services).vm_uuid
    services.projections.catch_up()
    start = services.commands.head_position()
    assert services.worker.run_vm(vm_uuid)  # JobStarted, three steps, Provisioned, succeeded
    seen: list = []
    # The rival applies only the first two new events; this runner read the same start
    # position and holds all of them, so applying them would apply those two twice.
    loser = second_runner(
        services, RacedSource(services.app.recorder, rival(services, view, seen, batch_size=2))
    )
    with pytest.raises(ProjectionConflictError):
        loser.run_once(view)
    [after_the_winner] = seen
    assert services.projections.position(view) > start
    assert snapshot(services) == after_the_winner
    services.projections.catch_up()
    [job] = services.jobs.list(vm_uuid=vm_uuid)
    assert [s["name"] for s in job["chain_results"]] == [
        "place", "ensure_registered", "ensure_state"]


def test_wait_for_returns_false_on_timeout_when_nothing_catches_up(services):
    create(services)
    head = services.commands.head_position()
    assert services.projections.wait_for(head, VIEWS, timeout=0.1) is False
    assert [services.projections.positions()[view] for view in VIEWS] == [0, 0]


def test_wait_for_returns_true_once_the_read_models_are_caught_up(services, monkeypatch):
    create(services)
    head = services.commands.head_position()
    looked = threading.Event()
    positions = services.projections.positions

    def positions_seen():
        found = positions()
        looked.set()
        return found

    monkeypatch.setattr(services.projections, "positions", positions_seen)
    outcome: list[bool] = []
    waiter = threading.Thread(
        target=lambda: outcome.append(services.projections.wait_for(head, VIEWS, timeout=30))
    )
    waiter.start()
    assert looked.wait(10)  # the waiter has seen the read models behind the log...
    assert outcome == []  # ...and is still waiting
    services.projections.catch_up()
    waiter.join(30)
    assert outcome == [True]


def test_the_background_runner_catches_up_and_wait_for_sees_it(services):
    accepted = create(services)
    services.start_background(worker=False)
    assert services.projections.wait_for(accepted.position, VIEWS, timeout=10) is True
    assert services.vms.get(accepted.vm_uuid)["state"] == "provisioning"


def test_two_runners_catching_up_at_once_give_the_rows_one_runner_gives(services):
    a_mix_of_commands_and_jobs(services)
    expected = snapshot(services)
    services.projections.reset(VIEWS)
    runners = [second_runner(services, batch_size=2) for _ in range(2)]
    barrier = threading.Barrier(2, timeout=10)
    conflicts: list[str] = []
    errors: list[BaseException] = []

    def run(runner: ProjectionRunner) -> None:
        try:
            barrier.wait()
            for view in VIEWS:
                while True:
                    try:
                        if not runner.run_once(view):
                            break
                    except ProjectionConflictError:
                        conflicts.append(view)  # the rival took this batch; read on
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(r,)) for r in runners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and not any(t.is_alive() for t in threads)
    assert snapshot(services) == expected


class CountingSource:
    """The log, counting the runner's batch reads and its reads of the head."""

    def __init__(self, recorder):
        self.recorder = recorder
        self.reads = 0
        self.heads = 0

    def select_notifications(self, *args, **kwargs):
        self.reads += 1
        return self.recorder.select_notifications(*args, **kwargs)

    def max_notification_id(self):
        self.heads += 1
        return self.recorder.max_notification_id()


def test_a_pass_reads_the_head_once_for_the_past_head_check_and_the_lag(services):
    create(services)
    source = CountingSource(services.app.recorder)
    lags: list[tuple[str, int]] = []
    runner = ProjectionRunner(
        services.db, source, services.app.mapper,
        [VmView(services.app.mapper.transcoder), JobView()],
        on_lag=lambda name, lag: lags.append((name, lag)), lag_interval_s=0)
    assert runner.catch_up()
    source.heads, lags[:] = 0, []
    # nothing new: the batch after the position the last pass reached comes back empty, so
    # the past-head check compares that position with the head, and the lag is reported
    assert runner.catch_up() == 0
    assert sorted(lags) == [("job_view", 0), ("vm_view", 0)]
    assert source.heads == 1


def test_no_read_model_changes_the_events_it_applies_so_read_models_can_share_a_batch(
    services,
):
    vms = a_mix_of_commands_and_jobs(services)
    volume, _ = services.commands.create_volume(
        name="data", cause=cause(), networks={"5f3c7d2e-1111-4222-8333-444455556666": "10.0.0.5"})
    create(services, volumes=[{"volume_uuid": str(volume.id), "mountpoint": "/data"}])
    services.commands.record_failure(vms[1], "crashed", "guest died", cause=cause())
    settle(services)
    runner = services.projections
    events = runner.decode(services.app.recorder.select_notifications(
        0, 100_000, inclusive_of_start=False))
    untouched = copy.deepcopy(events)
    assert {type(e).__name__ for _, e in events} >= {
        "Created", "JobQueued", "JobStarted", "JobStepRecorded", "JobSucceeded",
        "MetadataUpdated", "CapacityClaimed", "Registered"}
    shadows = [rm.beside("__shared") for rm in runner.read_models.values()]
    for shadow in shadows:
        prepare(services.db, shadow)
    with services.db.transaction() as tx:
        for shadow in shadows:
            shadow.apply(tx, events)
    assert events == untouched


def test_read_models_at_the_same_position_read_each_batch_once(services):
    a_mix_of_commands_and_jobs(services)
    head = services.commands.head_position()
    services.projections.reset(VIEWS)
    source = CountingSource(services.app.recorder)
    runner = second_runner(services, source, batch_size=10)
    expected = -(-head // 10)  # one read per batch; the last batch is short, no empty read
    assert runner.catch_up() == 2 * head
    assert source.reads == expected + (head % 10 == 0)
    assert runner.positions() == {view: head for view in VIEWS}
