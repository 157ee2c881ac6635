"""Group commit (service/commands/committer.py): appends queued together are written in one
transaction, and an append that conflicts fails alone while the rest of its batch commits,
idempotency keys with their own events; on SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError

from domain.vm import Vm, make_cause
from service.audit.verify import verify_chains
from service.commands.application import Accepted
from service.commands.committer import Committer
from service.commands.idempotency import IdempotencyKey
from service.container import Services
from tests.builders import create


class Gate:
    """Holds the committer's thread inside its first batch until ``open``, so that what is
    submitted meanwhile queues up and is written as the next batch."""

    def __init__(self, services: Services, monkeypatch: pytest.MonkeyPatch):
        recorder = services.app.recorder
        self.real = recorder.insert_batch
        self.sizes: list[int] = []
        self.entered, self.released = threading.Event(), threading.Event()
        monkeypatch.setattr(recorder, "insert_batch", self._insert_batch)

    def _insert_batch(self, appends: Any) -> Any:
        self.sizes.append(len(appends))
        if len(self.sizes) == 1:
            self.entered.set()
            assert self.released.wait(10)
        return self.real(appends)

    def open(self) -> None:
        self.released.set()

    def hold(self, services: Services, vm_uuid: str) -> Any:
        """Submit a change of ``vm_uuid`` and wait until its batch is held here; its future."""
        held = services.commands.committer.submit(renamed(services, vm_uuid, "held"))
        assert self.entered.wait(10)
        return held


def renamed(services: Services, vm_uuid: str, alias: str, version: int | None = None) -> Any:
    vm = services.commands.load(vm_uuid, version=version)
    vm.update_metadata({"alias": alias}, cause=make_cause("test"))
    return vm


def key_record(services: Services, key: str, vm: Any) -> dict[str, Any]:
    record = services.commands.keys.record(
        IdempotencyKey("tester", key, f"fingerprint-{key}"), 202,
        Accepted(str(vm.id), None, vm.version, None))
    return {"idempotency": record, "idempotency_expired_before": 0.0}


def test_a_batch_with_one_conflicting_command_commits_the_others(services, monkeypatch):
    first, good1, loser, good2 = (create(services).vm_uuid for _ in range(4))
    committer = services.commands.committer
    stale = renamed(services, loser, "stale")  # decided on version 2 ...
    services.app.save(renamed(services, loser, "winner"))  # ... which another writer moved
    gate = Gate(services, monkeypatch)

    held = committer.submit(renamed(services, first, "first"))
    assert gate.entered.wait(10)
    futures = [
        committer.submit(renamed(services, good1, "one"), **key_record(services, "k1", stale)),
        committer.submit(stale, **key_record(services, "k-stale", stale)),
        committer.submit(renamed(services, good2, "two"), **key_record(services, "k2", stale)),
    ]
    gate.open()
    held.result(10)
    one, two = futures[0].result(10), futures[2].result(10)
    with pytest.raises(IntegrityError):
        futures[1].result(10)

    assert gate.sizes == [1, 3]  # the three queued appends were one transaction
    assert services.commands.load(good1).alias == "one"
    assert services.commands.load(good2).alias == "two"
    assert services.commands.load(loser).alias == "winner"
    assert services.commands.load(loser).version == 3
    # Each caller has its own recordings, so its own version and position.
    assert [r.domain_event.originator_id for r in one] == [services.commands.load(good1).id]
    assert one[-1].domain_event.originator_version == 3
    assert two[-1].notification.id > one[-1].notification.id
    keys = services.commands.keys
    assert keys.find(IdempotencyKey("tester", "k1", "fingerprint-k1")) is not None
    assert keys.find(IdempotencyKey("tester", "k2", "fingerprint-k2")) is not None
    assert keys.find(IdempotencyKey("tester", "k-stale", "fingerprint-k-stale")) is None
    assert verify_chains(services.app) == []


@pytest.mark.parametrize("stale_at", [(0,), (4,), (0, 4), (1, 2, 3), (0, 1, 2, 3, 4)])
def test_conflicts_anywhere_in_a_batch_fail_alone_and_the_rest_commit_in_order(
        services, monkeypatch, stale_at):
    # The first flush has no savepoints: a conflict there rolls the whole transaction back,
    # and the rest are sent again, under savepoints, where a second conflict is met.
    vms = [create(services).vm_uuid for _ in range(6)]
    head, batch_vms = vms[0], vms[1:]
    stale = {i: renamed(services, batch_vms[i], "stale") for i in stale_at}
    for i in stale_at:
        services.app.save(renamed(services, batch_vms[i], "winner"))
    committer = services.commands.committer
    gate = Gate(services, monkeypatch)
    held = gate.hold(services, head)
    futures = [committer.submit(stale[i] if i in stale else renamed(services, vm, f"new-{i}"),
                                **key_record(services, f"k{i}", renamed(services, vm, "-")))
               for i, vm in enumerate(batch_vms)]
    gate.open()
    held.result(10)

    positions = []
    for i, (vm, future) in enumerate(zip(batch_vms, futures, strict=True)):
        key = IdempotencyKey("tester", f"k{i}", f"fingerprint-k{i}")
        if i in stale:
            with pytest.raises(IntegrityError):
                future.result(10)
            assert services.commands.load(vm).alias == "winner"
            assert services.commands.keys.find(key) is None
        else:
            positions.append(future.result(10)[-1].notification.id)
            assert services.commands.load(vm).alias == f"new-{i}"
            assert services.commands.keys.find(key) is not None
    assert gate.sizes == [1, 5]
    assert positions == sorted(positions)
    assert verify_chains(services.app) == []


def test_a_repeated_idempotency_key_in_one_batch_fails_only_the_second(services, monkeypatch):
    vms = [create(services).vm_uuid for _ in range(3)]
    committer = services.commands.committer
    gate = Gate(services, monkeypatch)
    held = gate.hold(services, vms[0])
    a, b = renamed(services, vms[1], "a"), renamed(services, vms[2], "b")
    futures = [committer.submit(a, **key_record(services, "same", a)),
               committer.submit(b, **key_record(services, "same", a))]
    gate.open()
    held.result(10)
    futures[0].result(10)
    with pytest.raises(IntegrityError):
        futures[1].result(10)
    assert services.commands.load(vms[1]).alias == "a"
    assert services.commands.load(vms[2]).alias != "b"


def test_appends_handed_over_without_futures_are_settled_batch_by_batch(services, monkeypatch):
    # the replay's way (Committer.hand_over): no Future an append; each learns its outcome,
    # its own recordings or its own conflict, when its batch is written
    first, good, loser = (create(services).vm_uuid for _ in range(3))
    committer = services.commands.committer
    stale = renamed(services, loser, "stale")
    services.app.save(renamed(services, loser, "winner"))
    gate = Gate(services, monkeypatch)
    held = gate.hold(services, first)
    handed = [committer.hand_over(renamed(services, good, "one")), committer.hand_over(stale)]
    assert not any(h.done for h in handed)  # queued behind the held batch
    gate.open()
    held.result(10)
    recordings = committer.wait_for(handed[0], timeout=10)
    with pytest.raises(IntegrityError):
        committer.wait_for(handed[1], timeout=10)
    assert gate.sizes == [1, 2] and all(h.done for h in handed)
    assert recordings[-1].domain_event.originator_version == 3
    assert services.commands.load(good).alias == "one"
    assert services.commands.load(loser).alias == "winner"


def test_a_one_thread_committer_holds_no_turn(services):
    committer = Committer(services.app, one_thread=True)
    with committer.turn("stream"), committer.turn("stream"):
        assert committer._turns.free_for("stream", object())  # nothing held


def test_concurrent_commands_through_the_change_loop_are_all_recorded(services):
    # 8 threads, 4 VMs, 10 renames each: conflicts retried by the change loop; every rename
    # is recorded once, whichever batch it went in.
    vms = [create(services).vm_uuid for _ in range(4)]
    errors: list[BaseException] = []

    def rename(n: int) -> None:
        try:
            for i in range(10):
                services.commands.change(
                    Vm, vms[n % 4], lambda vm, i=i: vm.update_metadata(
                        {"alias": f"t{n}-{i}"}, cause=make_cause("test")))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=rename, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert sum(services.commands.load(vm).version for vm in vms) == 4 * 2 + 80
    assert verify_chains(services.app) == []


def test_each_append_of_a_batch_gets_the_positions_of_its_own_events(services, monkeypatch):
    # A batch's events go in one INSERT on PostgreSQL: each append's recordings must still
    # name its own rows, whatever the number of events an append.
    vms = [create(services).vm_uuid for _ in range(4)]
    committer = services.commands.committer
    gate = Gate(services, monkeypatch)
    held = gate.hold(services, vms[0])
    futures = []
    for count, vm_uuid in zip((3, 1, 2), vms[1:], strict=True):
        vm = services.commands.load(vm_uuid)
        for n in range(count):
            vm.update_metadata({"alias": f"{vm_uuid[:8]}-{n}"}, cause=make_cause("test"))
        futures.append(committer.submit(vm))
    gate.open()
    held.result(10)
    assert gate.sizes == [1, 3]
    recorder = services.app.recorder
    positions = []
    for count, future in zip((3, 1, 2), futures, strict=True):
        recordings = future.result(10)
        assert len(recordings) == count
        for recording in recordings:
            (stored,) = recorder.select_notifications(recording.notification.id, 1)
            assert stored.id == recording.notification.id
            assert stored.originator_id == recording.domain_event.originator_id
            assert stored.originator_version == recording.domain_event.originator_version
            positions.append(stored.id)
    assert positions == list(range(positions[0], positions[0] + 6))  # consecutive, in order


def test_text_with_quotes_percents_and_backslashes_is_stored_as_given(services, monkeypatch):
    # On PostgreSQL a batch is sent as the text of its statements: values are bound into it,
    # and nothing in them may be read as SQL or as a placeholder.
    awkward = "it's 100%s \\x00 %(name)s; COMMIT; --\u00e9"
    vms = [create(services).vm_uuid for _ in range(3)]
    committer = services.commands.committer
    gate = Gate(services, monkeypatch)
    held = gate.hold(services, vms[0])
    futures = [committer.submit(renamed(services, vm_uuid, f"{awkward}{n}"),
                                **key_record(services, f"{awkward}{n}",
                                             renamed(services, vm_uuid, "-")))
               for n, vm_uuid in enumerate(vms[1:])]
    gate.open()
    held.result(10)
    assert gate.sizes == [1, 2]
    for n, (vm_uuid, future) in enumerate(zip(vms[1:], futures, strict=True)):
        future.result(10)
        assert services.commands.load(vm_uuid).alias == f"{awkward}{n}"
        key = IdempotencyKey("tester", f"{awkward}{n}", f"fingerprint-{awkward}{n}")
        assert services.commands.keys.find(key) is not None
    assert verify_chains(services.app) == []
