"""Command tasks (service/commands/tasks.py): commands run on the committer's thread, parking
where a thread would wait; their appends are batched with other threads' appends, a turn held
by a thread never blocks the committer, and every command's outcome reaches its caller; on
SQLite and on PostgreSQL."""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import Future
from typing import Any

import pytest

from domain.errors import VmNotFoundError
from domain.states import Action
from domain.vm import Vm, make_cause
from service.audit.verify import verify_chains
from service.commands.tasks import TaskWithdrawn
from service.container import Services
from tests.waiting import wait_until
from tests.builders import act, create
from tests.service.test_committer import Gate


class TurnHeld:
    """A thread holding ``vm_uuid``'s turn until ``release``, then running ``then`` (if given)
    before it gives the turn back."""

    def __init__(self, services: Services, vm_uuid: str, then: Any = None):
        self.inside, self.leave = threading.Event(), threading.Event()

        def holder() -> None:
            with services.commands.committer.turn(vm_uuid):
                self.inside.set()
                assert self.leave.wait(10)
                if then is not None:
                    then()

        self.thread = threading.Thread(target=holder)
        self.thread.start()
        assert self.inside.wait(10)

    def release(self) -> None:
        self.leave.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


def run(services: Services, command: Any) -> Future[Any]:
    """``command`` handed to the committer as an async route hands it."""
    return services.commands.committer.run(command, contextvars.copy_context())


def rename(services: Services, vm_uuid: str, alias: str) -> Any:
    return services.commands.change(
        Vm, vm_uuid, lambda vm: vm.update_metadata({"alias": alias}, cause=make_cause("test")))


def test_a_command_runs_on_the_committers_thread_and_answers_its_caller(services):
    vm_uuid = create(services).vm_uuid
    threads: list[str] = []

    def stop() -> Any:
        threads.append(threading.current_thread().name)
        return act(services, vm_uuid, Action.STOP)

    accepted = run(services, stop).result(10)
    assert threads == ["vmledger-committer"]
    assert accepted.vm_uuid == vm_uuid and accepted.job_uuid and accepted.position
    assert services.commands.load(vm_uuid).version == accepted.version


def test_a_refusal_reaches_the_caller_and_the_committer_goes_on(services):
    with pytest.raises(VmNotFoundError):
        run(services, lambda: act(services, "0" * 8 + "-0000-4000-8000-" + "0" * 12,
                                  Action.STOP)).result(10)
    assert run(services, lambda: create(services)).result(10).position


def test_tasks_appends_and_a_threads_append_are_written_in_one_batch(services, monkeypatch):
    held_vm, *vms = (create(services).vm_uuid for _ in range(4))
    committer = services.commands.committer
    gate = Gate(services, monkeypatch)
    writer = threading.Thread(target=rename, args=(services, held_vm, "held"))
    writer.start()
    assert gate.entered.wait(10)
    other = threading.Thread(target=rename, args=(services, vms[2], "thread"))
    other.start()
    wait_until(lambda: len(committer._queue) == 1)  # the thread's append is queued
    tasks = [run(services, lambda vm=vm: rename(services, vm, f"task-{vm}")) for vm in vms[:2]]
    gate.open()
    writer.join(10)
    other.join(10)
    positions = [task.result(10).position for task in tasks]
    assert gate.sizes == [1, 3]  # the tasks ran, parked on their appends, joined the thread's
    assert positions[0] != positions[1]
    assert [services.commands.load(vm).alias for vm in vms] == [
        f"task-{vms[0]}", f"task-{vms[1]}", "thread"]
    assert verify_chains(services.app) == []


def test_a_task_parks_on_a_turn_a_thread_holds_and_the_threads_save_still_commits(services):
    vm_uuid, other_vm = create(services).vm_uuid, create(services).vm_uuid
    # the thread's save, while it holds the turn, needs the committer's thread
    held = TurnHeld(services, vm_uuid, then=lambda: rename(services, vm_uuid, "thread"))
    waiting = run(services, lambda: rename(services, vm_uuid, "task"))
    # The parked task does not hold the committer: another task's command goes through.
    assert run(services, lambda: rename(services, other_vm, "free")).result(10)
    assert not waiting.done()
    held.release()
    waiting.result(10)
    vm = services.commands.load(vm_uuid)
    assert vm.alias == "task" and vm.version == 4  # the thread's, then the task's


def test_tasks_of_one_stream_take_turns_and_none_conflicts(services):
    vm_uuid = create(services).vm_uuid
    conflicts: list[int] = []
    services.commands.on_conflict = lambda: conflicts.append(1)
    futures = [run(services, lambda n=n: rename(services, vm_uuid, f"n{n}")) for n in range(20)]
    for future in futures:
        future.result(20)
    assert conflicts == []
    assert services.commands.load(vm_uuid).version == 2 + 20
    assert verify_chains(services.app) == []


def test_a_task_that_conflicts_backs_off_parked_and_decides_again(services, monkeypatch):
    vm_uuid = create(services).vm_uuid
    stale = services.commands.load(vm_uuid)  # what the task's first attempt decides on ...
    rename(services, vm_uuid, "winner")  # ... after which another writer moved the stream
    load = services.commands.load_aggregate
    served: list[Any] = [stale]
    # decided on a read of the log, not on this process's cached save (that path is
    # tests/service/test_aggregate_cache.py's)
    monkeypatch.setattr(services.commands, "_cached_save", lambda uuid: None)
    monkeypatch.setattr(services.commands, "load_aggregate",
                        lambda kind, uuid, version=None: served.pop() if served
                        else load(kind, uuid, version))
    conflicts: list[int] = []
    services.commands.on_conflict = lambda: conflicts.append(1)
    committer = services.commands.committer
    pauses: list[float] = []
    pause = committer.pause
    monkeypatch.setattr(committer, "pause", lambda s: (pauses.append(s), pause(s)))
    run(services, lambda: rename(services, vm_uuid, "task")).result(10)
    assert conflicts == [1] and len(pauses) == 1
    vm = services.commands.load(vm_uuid)
    assert vm.alias == "task" and vm.version == 4


def test_a_task_withdrawn_before_it_starts_never_runs(services, monkeypatch):
    vm_uuid = create(services).vm_uuid
    gate = Gate(services, monkeypatch)
    writer = threading.Thread(target=rename, args=(services, vm_uuid, "held"))
    writer.start()
    assert gate.entered.wait(10)
    ran: list[int] = []
    withdrawn = run(services, lambda: ran.append(1))
    assert withdrawn.cancel()
    gate.open()
    writer.join(10)
    assert run(services, lambda: "after").result(10) == "after"
    assert ran == []


def test_a_task_given_up_while_it_waits_for_a_turn_ends_unappended(services):
    vm_uuid = create(services).vm_uuid
    held = TurnHeld(services, vm_uuid)
    waiting = run(services, lambda: rename(services, vm_uuid, "task"))
    wait_until(waiting.running)
    assert not waiting.give_up()  # it had started: withdrawn where it waits
    with pytest.raises(TaskWithdrawn):
        waiting.result(10)
    held.release()
    assert services.commands.load(vm_uuid).version == 2


def test_a_task_given_up_once_its_append_is_in_a_batch_commits_with_it(services, monkeypatch):
    vm_uuid = create(services).vm_uuid
    gate = Gate(services, monkeypatch)
    in_batch = run(services, lambda: rename(services, vm_uuid, "task"))
    assert gate.entered.wait(10)  # the task's own batch is being written, held
    assert not in_batch.give_up()
    gate.open()
    assert in_batch.result(10).position
    assert services.commands.load(vm_uuid).alias == "task"
