"""``vm_view`` and ``job_view`` keep the VMs and jobs a committed batch folded for the next
batch from the position it reached (``projections.kept_folds``; docs/performance.md, P5): what
a batch folds onto kept ones must equal what it folds onto the rows, and a batch that does not commit must leave nothing
kept, since the fold changes the kept VMs in place."""

from __future__ import annotations

from uuid import UUID

import pytest

from domain.states import Action
from projections import job_view
from projections.job_view import JobView
from projections.live import LiveState
from projections.runner import ProjectionRunner
from projections.tracking import ProjectionConflictError
from projections.vm_view import VmView
from tests.builders import a_mix_of_commands_and_jobs, act, create
from tests.projections.test_runner import VIEWS, RacedSource, rival, snapshot


def runner(services, source=None, *, kept: int = 4096, batch_size: int = 500
           ) -> ProjectionRunner:
    """A runner over the services' database whose ``vm_view`` and ``job_view`` keep up to
    ``kept`` VMs and jobs."""
    return ProjectionRunner(
        services.db, source or services.app.recorder, services.app.mapper,
        [VmView(services.app.mapper.transcoder, kept_vms=kept), JobView(kept_jobs=kept)],
        batch_size=batch_size)


def cold_rows(services) -> dict[str, object]:
    """The rows a runner that keeps nothing gives from position 0, in batches of 2."""
    services.projections.reset(VIEWS)
    runner(services, kept=0, batch_size=2).catch_up()
    return snapshot(services)


class UpTo:
    """The log as far as position ``stop``."""

    def __init__(self, recorder, stop: int):
        self.recorder, self.stop = recorder, stop

    def select_notifications(self, start, limit, stop=None, topics=(), *,
                             inclusive_of_start=True):
        return self.recorder.select_notifications(
            start, limit, self.stop if stop is None else min(stop, self.stop), topics,
            inclusive_of_start=inclusive_of_start)

    def max_notification_id(self):
        return self.stop


def thaws_of(view: VmView, monkeypatch) -> list[str]:
    """The VMs ``view`` thaws from their rows from now on, in order."""
    thawed: list[str] = []
    real = view.thaw

    def counted(vm_id, version, blob):
        thawed.append(str(vm_id))
        return real(vm_id, version, blob)
    monkeypatch.setattr(view, "thaw", counted)
    return thawed


def test_batches_folding_onto_kept_vms_give_the_rows_of_batches_that_keep_none(
        services, monkeypatch):
    a_mix_of_commands_and_jobs(services)
    expected = cold_rows(services)
    services.projections.reset(VIEWS)
    keeping = runner(services, batch_size=2)
    thawed = thaws_of(keeping.read_models["vm_view"], monkeypatch)
    jobs_read: list[str] = []
    real_loaded = job_view._loaded
    monkeypatch.setattr(job_view, "_loaded", lambda stored, job_uuid: (
        jobs_read.append(job_uuid), real_loaded(stored, job_uuid))[1])
    keeping.catch_up()
    assert snapshot(services) == expected
    # every VM and job was kept from the batch before: none was read from its row
    assert thawed == [] and jobs_read == []


def test_a_vm_kept_after_its_batch_is_folded_without_its_row(services, monkeypatch):
    vm_uuid = create(services).vm_uuid
    keeping = runner(services)
    keeping.catch_up()
    view = keeping.read_models["vm_view"]
    assert view.kept.at == services.commands.head_position() and len(view.kept) == 1
    thawed = thaws_of(view, monkeypatch)
    act(services, vm_uuid, Action.STOP)
    keeping.catch_up()
    assert thawed == []
    assert snapshot(services) == cold_rows(services)


def test_a_batch_rolled_back_after_folding_leaves_nothing_kept(services, monkeypatch):
    vm_uuid = create(services).vm_uuid
    keeping = runner(services)
    keeping.catch_up()
    view = keeping.read_models["vm_view"]
    act(services, vm_uuid, Action.STOP)
    before = snapshot(services)
    real_write = view.write

    def write_then_crash(tx, events, stored):
        real_write(tx, events, stored)  # the kept VM is folded in place...
        raise RuntimeError("crash after writing rows")  # ...and the transaction rolled back

    monkeypatch.setattr(view, "write", write_then_crash)
    with pytest.raises(RuntimeError, match="crash"):
        keeping.catch_up()
    assert snapshot(services) == before and view.kept.at is None
    monkeypatch.undo()
    keeping.catch_up()  # the same batch again, from the row: the fold is not applied twice
    assert snapshot(services) == cold_rows(services)


def test_a_refused_batch_leaves_nothing_kept_even_if_its_position_comes_back(services):
    vm_uuid = create(services).vm_uuid
    keeping = runner(services, RacedSource(services.app.recorder, lambda: None))
    keeping.catch_up()
    kept_at = services.commands.head_position()
    act(services, vm_uuid, Action.STOP)
    seen: list = []
    keeping.source.rival = rival(services, "vm_view", seen)  # wins the batch after kept_at
    with pytest.raises(ProjectionConflictError):
        keeping.catch_up(live=LiveState(positions=dict.fromkeys(VIEWS, kept_at)))
    keeping.source.rival = lambda: None
    view = keeping.read_models["vm_view"]
    assert view.kept.at is None
    # Reset and applied again just as far as kept_at: a batch from there commits, and must
    # fold the STOP onto the row as it is at kept_at, not onto the refused batch's fold.
    services.projections.reset(VIEWS)
    runner(services, UpTo(services.app.recorder, kept_at), kept=0).catch_up()
    keeping.catch_up()
    assert snapshot(services) == cold_rows(services)


def test_vms_kept_before_a_rebuild_switched_at_their_position_still_fold_right(
        services, monkeypatch):
    vm_uuid = create(services).vm_uuid
    keeping = runner(services)
    keeping.catch_up()
    view = keeping.read_models["vm_view"]
    services.projections.rebuild(["vm_view"])  # switched at the position the VM was kept at
    thawed = thaws_of(view, monkeypatch)
    act(services, vm_uuid, Action.STOP)
    keeping.catch_up()
    assert thawed == []  # the claim from the kept position succeeded: still the rows there
    assert snapshot(services) == cold_rows(services)


def test_a_copy_built_beside_keeps_its_own_vms(services):
    create(services)
    keeping = runner(services)
    keeping.catch_up()
    view = keeping.read_models["vm_view"]
    shadow = view.beside("__rebuild")
    assert shadow.kept is not view.kept and shadow.kept.at is None and len(view.kept) == 1


def test_only_the_most_recently_folded_vms_are_kept_beyond_the_bound(services):
    vms = [create(services).vm_uuid for _ in range(3)]
    keeping = runner(services, kept=2)
    keeping.catch_up()
    act(services, vms[0], Action.STOP)
    keeping.catch_up()
    view = keeping.read_models["vm_view"]
    assert len(view.kept) == 2
    assert UUID(vms[0]) in view.kept and UUID(vms[2]) in view.kept  # the batches' last
