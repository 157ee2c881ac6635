"""The command handlers against a real event store (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from uuid import UUID

import pytest
from eventsourcing.persistence import IntegrityError

from domain.errors import UnallocatedVmError, VersionMismatchError, VmNotFoundError
from domain.states import Action
from domain.vm import Vm
from service.commands.application import ConflictRetriesExhaustedError
from service.container import Services
from tests.builders import OWNER, act, create, event_names, stream


def test_create_vm_appends_created_and_the_queued_provision_job(services):
    accepted = create(services, alias="web-1")
    events = stream(services, accepted.vm_uuid)
    assert [type(e).__name__ for e in events] == ["Created", "JobQueued"]
    assert events[1].name == "provision" and events[1].job_uuid == accepted.job_uuid
    assert accepted.version == 2
    assert accepted.position == services.commands.head_position()
    assert services.commands.load(accepted.vm_uuid).alias == "web-1"


def test_request_action_queues_a_job_and_reports_version_and_position(services):
    vm = create(services)
    accepted = act(services, vm.vm_uuid, Action.STOP, version=2)
    assert accepted.job_uuid and accepted.job_uuid != vm.job_uuid
    assert accepted.version == 3
    assert accepted.position == services.commands.head_position()
    assert event_names(services, vm.vm_uuid)[-1] == "JobQueued"


def test_repeating_an_action_already_queued_returns_the_same_job_and_appends_nothing(services):
    vm = create(services)
    first = act(services, vm.vm_uuid, Action.STOP, version=2)
    head = services.commands.head_position()
    again = act(services, vm.vm_uuid, Action.STOP, version=2)
    assert again.job_uuid == first.job_uuid
    assert again.position is None and again.version == first.version
    assert services.commands.head_position() == head


def test_an_update_with_other_arguments_is_not_a_repeat(services):
    vm = create(services)
    first = act(services, vm.vm_uuid, Action.UPDATE, version=2, args={"alias": "a"})
    second = act(services, vm.vm_uuid, Action.UPDATE, version=2, args={"alias": "b"})
    assert first.job_uuid != second.job_uuid
    assert second.version == first.version + 1


def test_if_match_naming_another_version_raises_and_appends_nothing(services):
    vm = create(services)
    head = services.commands.head_position()
    with pytest.raises(VersionMismatchError) as refused:
        act(services, vm.vm_uuid, Action.STOP, version=2, if_match=1)
    assert (refused.value.expected, refused.value.current) == (1, 2)
    assert services.commands.head_position() == head
    assert event_names(services, vm.vm_uuid) == ["Created", "JobQueued"]


def test_if_match_naming_the_current_version_is_accepted(services):
    vm = create(services)
    accepted = act(services, vm.vm_uuid, Action.STOP, version=2, if_match=2)
    assert accepted.version == 3


def test_a_refused_action_appends_nothing(services):
    vm = create(services)
    head = services.commands.head_position()
    with pytest.raises(UnallocatedVmError):
        act(services, vm.vm_uuid, Action.STOP, version=1)
    assert services.commands.head_position() == head


def test_another_owners_vm_is_not_found_and_nothing_is_appended(services):
    vm = create(services)
    head = services.commands.head_position()
    with pytest.raises(VmNotFoundError):
        act(services, vm.vm_uuid, Action.STOP, version=2,
            owner_uuid="00000000-0000-4000-8000-00000000beef")
    assert services.commands.head_position() == head
    assert act(services, vm.vm_uuid, Action.STOP, version=2, owner_uuid=OWNER).job_uuid


@pytest.mark.parametrize("vm_uuid", ["6d8e7c0a-0000-4000-8000-000000000000", "not-a-uuid"])
def test_an_unknown_vm_is_not_found(services, vm_uuid):
    with pytest.raises(VmNotFoundError):
        act(services, vm_uuid, Action.STOP, version=2)


def test_a_conflict_with_another_writer_is_retried_and_both_writes_land(services, monkeypatch):
    # The other writer is another process (its own pool and group committer): within one
    # process the change loop takes a stream's writers in turn (Committer.turn).
    vm = create(services)
    other = Services.build(services.settings)
    conflicts: list[int] = []
    # Both writers must have read the VM at the same version before either saves: the
    # barrier holds each one's first load until the other has loaded too.
    barrier = threading.Barrier(2, timeout=10)
    unpatched_load = services.commands.load_aggregate
    for writer in (services, other):
        count_metric = writer.commands.on_conflict
        monkeypatch.setattr(writer.commands, "on_conflict",
                            lambda count_metric=count_metric: (conflicts.append(1),
                                                               count_metric()))
        first_load = threading.local()
        load = writer.commands.load_aggregate  # the change loop's one loader

        def load_then_wait(kind, uuid, version=None, load=load, first_load=first_load):
            loaded = load(kind, uuid, version)
            if version is None and not getattr(first_load, "done", False):
                first_load.done = True
                barrier.wait()
            return loaded

        monkeypatch.setattr(writer.commands, "load_aggregate", load_then_wait)
        # each decides on a read of the log, not on its cached save (tests/service/
        # test_aggregate_cache.py races that path)
        monkeypatch.setattr(writer.commands, "_cached_save", lambda uuid: None)
    results: dict[str, object] = {}

    def queue_update(writer: Services, alias: str) -> None:
        try:
            results[alias] = act(writer, vm.vm_uuid, Action.UPDATE, version=2,
                                 args={"alias": alias})
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            results[alias] = error

    threads = [threading.Thread(target=queue_update, args=(w, a))
               for w, a in ((services, "left"), (other, "right"))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        other.close()
    assert not any(thread.is_alive() for thread in threads)
    assert all(not isinstance(r, BaseException) for r in results.values()), results
    assert len(conflicts) >= 1  # they really collided
    queued = [e for e in stream(services, vm.vm_uuid) if type(e).__name__ == "JobQueued"]
    assert sorted(e.params["args"]["alias"] for e in queued[1:]) == ["left", "right"]
    assert {e.job_uuid for e in queued[1:]} == {r.job_uuid for r in results.values()}
    assert unpatched_load(Vm, vm.vm_uuid).version == 4


def test_a_writer_that_always_loses_gives_up_after_the_configured_retries(services, monkeypatch):
    vm = create(services)
    attempts: list[int] = []

    def always_conflicting(*aggregates, **kwargs):
        attempts.append(1)
        raise IntegrityError("simulated conflict")

    monkeypatch.setattr(services.commands.committer, "save", always_conflicting)
    with pytest.raises(ConflictRetriesExhaustedError):
        act(services, vm.vm_uuid, Action.STOP, version=2)
    # the first append, decided on this process's cached save, proves only that the cache
    # was stale; then ``retries`` attempts decided on the log's state
    assert len(attempts) == 1 + services.commands.retries


def test_load_folds_the_vm_at_a_past_version(services):
    vm = create(services)
    act(services, vm.vm_uuid, Action.STOP, version=2)
    assert services.commands.load(vm.vm_uuid, version=2).active_jobs[-1]["name"] == "provision"
    assert services.commands.load(UUID(vm.vm_uuid)).active_jobs[-1]["name"] == "stop"
