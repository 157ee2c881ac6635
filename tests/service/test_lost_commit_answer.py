"""A group commit whose ``COMMIT`` was applied but whose answer was lost (the connection cut,
or a wait past its bound closing it) is retried; the retry finds the batch's events where
that commit left them and answers with their positions, appending nothing twice
(``PostgresGroupCommit.insert_batch``, service/group_commit.py). PostgreSQL only: SQLite has no
connection to lose."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import IntegrityError

from service.audit.verify import verify_chains
from service.commands.idempotency import IdempotencyKey
from tests.builders import create
from tests.service.test_committer import Gate, key_record, renamed

pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


def lose_the_answer_once(group_commit: Any, monkeypatch: pytest.MonkeyPatch, method: str
                         ) -> list[str]:
    """Make ``group_commit``'s ``method`` (``_send_together`` or ``_send_appends``) commit,
    then cut its connection and raise as psycopg does when the answer never comes; once."""
    real, cut = getattr(group_commit, method), []

    def committed_then_cut(conn: Any, *args: Any, **kwargs: Any) -> Any:
        answer = real(conn, *args, **kwargs)
        if not cut and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            cut.append(method)
            conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return answer

    monkeypatch.setattr(group_commit, method, committed_then_cut)
    return cut


@pytest.mark.parametrize("stale_at, lost_in", [
    ((), "_send_together"),  # no conflict: the whole batch in one query
    ((1,), "_send_appends"),  # a conflict: the rest sent again under savepoints
])
def test_a_batch_whose_commit_answer_was_lost_is_not_appended_twice(
        services, monkeypatch, stale_at, lost_in):
    vms = [create(services).vm_uuid for _ in range(4)]
    head, batch_vms = vms[0], vms[1:]
    stale = {i: renamed(services, batch_vms[i], "stale") for i in stale_at}
    for i in stale_at:
        services.app.save(renamed(services, batch_vms[i], "winner"))
    versions = {vm: services.commands.load(vm).version for vm in batch_vms}
    gate = Gate(services, monkeypatch)
    held = gate.hold(services, head)
    cut = lose_the_answer_once(services.app.recorder.group_commit, monkeypatch, lost_in)
    futures = [services.commands.committer.submit(
        stale[i] if i in stale else renamed(services, vm, f"new-{i}"),
        **key_record(services, f"k{i}", renamed(services, vm, "-")))
        for i, vm in enumerate(batch_vms)]
    gate.open()
    held.result(10)

    for i, (vm, future) in enumerate(zip(batch_vms, futures, strict=True)):
        key = IdempotencyKey("tester", f"k{i}", f"fingerprint-k{i}")
        if i in stale:
            with pytest.raises(IntegrityError):
                future.result(10)
            assert services.commands.load(vm).version == versions[vm]
            assert services.commands.keys.find(key) is None
            continue
        recordings = future.result(10)  # the retry's answer: not a conflict with itself
        loaded = services.commands.load(vm)
        assert loaded.alias == f"new-{i}" and loaded.version == versions[vm] + 1
        history = services.app.recorder.select_stream(loaded.id, versions[vm], 10)
        assert [n.id for n in history] == [r.notification.id for r in recordings]
        assert services.commands.keys.find(key) is not None
    assert cut == [lost_in]  # the answer was lost after the commit, once
    assert verify_chains(services.app) == []


def test_a_batch_that_did_not_commit_before_its_connection_was_lost_is_sent_again(
        services, monkeypatch):
    vm = create(services).vm_uuid
    recorder = services.app.recorder
    real, cut = recorder.group_commit._send_together, []

    def cut_before_sending(conn: Any, *args: Any, **kwargs: Any) -> Any:
        if not cut:
            cut.append(1)
            conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return real(conn, *args, **kwargs)

    monkeypatch.setattr(recorder.group_commit, "_send_together", cut_before_sending)
    version = services.commands.load(vm).version
    recordings = services.commands.committer.submit(renamed(services, vm, "again")).result(10)
    assert cut == [1]
    assert services.commands.load(vm).version == version + 1
    assert [r.notification.id for r in recordings] == [
        n.id for n in recorder.select_stream(services.commands.load(vm).id, version, 10)]
