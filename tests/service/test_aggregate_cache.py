"""Deciding on the cache (service/commands/aggregate_cache.py): a command on a stream this
process saved last reads no log; a decision made on such a cached fold counts only once its
append commits, and anything else (a refusal, nothing to append, a conflict) is decided again
on the log's state. "Another process" is a second ``Services`` over the same database, with
its own pool, committer and cache. SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any
from uuid import UUID, uuid4

import pytest

from domain.errors import VersionMismatchError
from domain.vm import Vm, make_cause
from service.audit.verify import verify_chains
from service.commands.aggregate_cache import SavedHere
from service.container import Services
from tests.builders import create


def rename(services: Services, vm_uuid: str, alias: str, **options: Any) -> Any:
    return services.commands.change(
        Vm, vm_uuid, lambda vm: vm.update_metadata({"alias": alias}, cause=make_cause("test")),
        **options)


@pytest.fixture
def other(services: Services) -> Iterator[Services]:
    """Another process's services over the same database."""
    other = Services.build(services.settings)
    yield other
    other.close()


@pytest.fixture
def conflicts(services: Services, monkeypatch) -> list[str]:
    """What this process's change loop counted as conflicts, and the back-offs it took."""
    seen: list[str] = []
    monkeypatch.setattr(services.commands, "on_conflict", lambda: seen.append("conflict"))
    monkeypatch.setattr(services.commands.committer, "pause",
                        lambda seconds: seen.append(f"pause {seconds}"))
    return seen


def stream_reads(services: Services, monkeypatch) -> list[UUID]:
    """The streams this process reads from the log from now on (each read's originator)."""
    reads: list[UUID] = []
    event_store = services.app.repository.event_store
    get = event_store.get

    def counted(originator_id, *args, **kwargs):
        reads.append(originator_id)
        return get(originator_id, *args, **kwargs)

    monkeypatch.setattr(event_store, "get", counted)
    return reads


def test_a_command_on_a_vm_this_process_saved_last_reads_no_log(services, monkeypatch):
    vm_uuid = create(services).vm_uuid
    reads = stream_reads(services, monkeypatch)
    rename(services, vm_uuid, "a")
    rename(services, vm_uuid, "b")
    assert reads == []
    assert services.commands.load(vm_uuid).alias == "b"  # a plain load reads: it must be current
    assert reads == [UUID(vm_uuid)]


def test_a_command_on_a_vm_another_process_saved_reads_the_log(services, other, monkeypatch):
    vm_uuid = create(services).vm_uuid
    reads = stream_reads(other, monkeypatch)
    rename(other, vm_uuid, "theirs")
    assert reads == [UUID(vm_uuid)]  # nothing of its own to go by: it reads before deciding
    rename(other, vm_uuid, "again")
    assert reads == [UUID(vm_uuid)]  # now its cache holds its own save


def test_an_append_decided_on_a_stale_cached_save_is_decided_again_on_the_log(
        services, other, conflicts):
    vm_uuid = create(services).vm_uuid  # this process's cache: version 2, saved here
    rename(other, vm_uuid, "theirs")  # version 3, appended by another process
    changed = rename(services, vm_uuid, "ours")
    assert changed.aggregate.version == 4 and changed.position is not None
    assert conflicts == []  # a stale cache is neither a conflict nor a reason to back off
    assert services.commands.load(vm_uuid).alias == "ours"
    assert verify_chains(services.app) == []


def test_a_refusal_on_a_stale_cached_save_is_checked_on_the_log(services, other, conflicts):
    vm_uuid = create(services).vm_uuid
    rename(other, vm_uuid, "theirs")
    # the client saw version 3 (another process's answer); this process's cache says 2
    changed = rename(services, vm_uuid, "ours", if_match=3)
    assert changed.aggregate.version == 4
    assert conflicts == []


def test_a_refusal_that_holds_on_the_log_is_given(services, other, conflicts):
    vm_uuid = create(services).vm_uuid
    rename(other, vm_uuid, "theirs")
    with pytest.raises(VersionMismatchError) as refused:
        rename(services, vm_uuid, "ours", if_match=2)  # matches the stale cache only
    assert (refused.value.expected, refused.value.current) == (2, 3)
    assert services.commands.load(vm_uuid).version == 3  # nothing appended


def test_an_error_that_is_not_a_refusal_is_raised_at_once_not_decided_again(services):
    vm_uuid = create(services).vm_uuid
    calls: list[int] = []

    def failing(vm: Vm) -> None:
        calls.append(vm.version)
        raise RuntimeError("the database went away")  # not the VM's state: no fresh retry

    with pytest.raises(RuntimeError):
        services.commands.change(Vm, vm_uuid, failing)
    assert calls == [2]


def test_a_decision_that_appends_nothing_is_made_on_the_log(services, other):
    vm_uuid = create(services).vm_uuid
    rename(other, vm_uuid, "theirs")
    changed = services.commands.change(Vm, vm_uuid, lambda vm: (vm.version, vm.alias))
    assert changed.decision == (3, "theirs") and changed.position is None


def test_a_load_hands_out_copies_and_never_moves_a_saved_aggregate(services, other):
    vm_uuid = create(services).vm_uuid
    saved = rename(services, vm_uuid, "ours").aggregate  # the object the cache now holds
    rename(other, vm_uuid, "theirs")
    loaded = services.commands.load(vm_uuid)
    assert (loaded.version, loaded.alias) == (4, "theirs")
    assert (saved.version, saved.alias) == (3, "ours")  # still what its command saved
    loaded.update_metadata({"alias": "scratch"}, cause=make_cause("test"))  # never saved
    assert services.commands.load(vm_uuid).alias == "theirs"


def test_writers_in_two_processes_racing_on_cached_saves_lose_no_update(services, other):
    vm_uuid = create(services).vm_uuid
    rename(other, vm_uuid, "warm")  # both caches hold the VM
    per_thread = 8
    errors: list[BaseException] = []
    start = threading.Barrier(4, timeout=10)

    def writer(process: Services, name: str) -> None:
        try:
            start.wait()
            for n in range(per_thread):
                rename(process, vm_uuid, f"{name}-{n}")
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(process, f"{label}{t}"))
               for process, label in ((services, "a"), (other, "b")) for t in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads) and errors == []
    events = list(services.app.repository.event_store.get(UUID(vm_uuid)))
    aliases = [e.changes["alias"] for e in events if type(e).__name__ == "MetadataUpdated"]
    assert len(aliases) == 1 + 4 * per_thread
    assert sorted(aliases[1:]) == sorted(f"{label}{t}-{n}" for label in "ab" for t in range(2)
                                         for n in range(per_thread))
    assert [e.originator_version for e in events] == list(range(1, len(events) + 1))
    assert verify_chains(services.app) == []


def test_a_process_whose_saves_keep_going_stale_stops_deciding_on_them_and_learns_back(
        services, other, monkeypatch):
    vm_uuid = create(services).vm_uuid
    committer = services.commands.committer
    save, failed = committer.save, []

    def counted(*aggregates, **kwargs):
        try:
            return save(*aggregates, **kwargs)
        except Exception:
            failed.append(1)
            raise

    monkeypatch.setattr(committer, "save", counted)
    for n in range(20):  # another process writes the VM between each two of this one's
        rename(other, vm_uuid, f"theirs-{n}")
        rename(services, vm_uuid, f"ours-{n}")
    assert not committer.saved_here.trusted
    assert 1 <= len(failed) <= 8  # a few wasted appends, then a read before each decision
    reads = stream_reads(services, monkeypatch)
    alone = 120  # after a long run of wrong guesses, about a hundred right ones
    for n in range(alone):  # now only this process writes it: its saves prove right again
        rename(services, vm_uuid, f"alone-{n}")
    assert committer.saved_here.trusted
    reads.clear()
    rename(services, vm_uuid, "trusted again")
    assert reads == [] and len(failed) <= 8
    assert services.commands.load(vm_uuid).version == 2 + 2 * 20 + alone + 1


def test_saved_here_trusts_while_most_recent_guesses_were_right():
    saved = SavedHere(maxsize=10)
    assert saved.trusted  # until shown otherwise
    wrong = 0
    while saved.trusted:
        saved.note(False)
        wrong += 1
    assert 3 <= wrong <= 10
    saved.note(True)
    assert not saved.trusted  # one right guess does not undo a run of wrong ones
    for _ in range(30):
        saved.note(True)
    assert saved.trusted


def test_saved_here_remembers_the_streams_saved_most_recently():
    saved = SavedHere(maxsize=2)
    first, second, third = uuid4(), uuid4(), uuid4()
    saved.record(first, 1)
    saved.record(second, 1)
    saved.record(first, 2)  # saved again: now the most recent
    saved.record(third, 1)
    assert (saved.version(first), saved.version(second), saved.version(third)) == (2, None, 1)
