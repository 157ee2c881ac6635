"""``vm_view`` rows edited behind the service's back (auditor tester): a row's folded state
that cannot be thawed, or that is another VM's, is replaced by a fold of the VM from the log
(the log is the truth, the row derived data), with a warning naming the read model, the VM and
the row, rather than wedging every read model or folding the next event onto another VM; and
a tracking row set back is said to be behind the rows, not a gap in an intact log."""

from __future__ import annotations

import logging
from uuid import UUID

import pytest

from domain.states import Action
from domain.vm import make_cause
from projections.vm_view import TrackingBehindError
from service.audit.read_models import verify_read_models
from service.commands.versioning import NEWEST
from service.storage import select_stream
from tests.integration.test_audit import _vm_with_history


def _forget_kept_folds(services) -> None:
    """As a runner in a fresh process: nothing kept in memory, every row read."""
    kept = services.projections.read_models["vm_view"].kept
    kept.begin(-1)
    kept.end(None)


def _set_snapshot(services, vm_uuid: str, blob: bytes) -> None:
    with services.db.transaction() as tx:
        tx.execute("UPDATE vm_view SET snapshot = ? WHERE uuid = ?", (blob, vm_uuid))


def _snapshot_of(services, vm_uuid: str) -> bytes:
    with services.db.transaction(commit=False) as tx:
        tx.execute("SELECT snapshot FROM vm_view WHERE uuid = ?", (vm_uuid,))
        return bytes(tx.fetchone()["snapshot"])


def _rename(services, vm_uuid: str, alias: str) -> None:
    services.commands.request_action(vm_uuid, Action.UPDATE, behaviour=NEWEST,
                                     cause=make_cause(), args={"alias": alias})


def _renamed_and_applied(services, vm_uuid: str, caplog) -> list[str]:
    """Rename the VM "renamed", run its update's job and catch the read models up; the
    warnings that they replaced a row's folded state."""
    _rename(services, vm_uuid, "renamed")
    with caplog.at_level(logging.WARNING):
        services.projections.catch_up()
        services.worker.run_pending()  # the update's job
        services.projections.catch_up()
    return [r.getMessage() for r in caplog.records if "folded state" in r.getMessage()]


@pytest.mark.parametrize("edit", ["undecodable", "another VM's"])
def test_an_edited_folded_state_is_folded_again_from_the_log(services, caplog, edit):
    vm_uuid = _vm_with_history(services)
    other = _vm_with_history(services)
    blob = b"x" if edit == "undecodable" else _snapshot_of(services, other)
    _set_snapshot(services, vm_uuid, blob)
    _forget_kept_folds(services)
    warned = _renamed_and_applied(services, vm_uuid, caplog)
    assert len(warned) == 1, warned
    assert warned[0].startswith(f"read model vm_view: the folded state of VM {vm_uuid} in "
                                f"row vm_view {vm_uuid} (version ")
    vm = services.vms.get(vm_uuid)
    assert vm["alias"] == "renamed" and vm["uuid"] == vm_uuid
    assert vm["version"] == services.commands.load(vm_uuid).version
    assert services.vms.get(other)["alias"] == "database"
    assert verify_read_models(services) == []


def test_the_audit_compares_the_folded_state_of_every_row(services):
    vm_uuid = _vm_with_history(services)
    other = _vm_with_history(services)
    assert verify_read_models(services) == []
    for blob in (b"x", _snapshot_of(services, other)):
        _set_snapshot(services, vm_uuid, blob)
        found = [(d.where, d.kind, d.detail) for d in verify_read_models(services)]
        assert found == [(f"vm_view row {vm_uuid}", "read model",
                          "differs from a fresh fold in snapshot")], blob[:20]


def test_a_tracking_row_set_back_is_behind_the_rows_not_a_gap(services):
    vm_uuid = _vm_with_history(services)
    others = [_vm_with_history(services) for _ in range(2)]
    created = select_stream(services.app.recorder, UUID(vm_uuid), 0, 1)[0]
    with services.db.transaction() as tx:
        tx.execute("UPDATE projection_tracking SET position = ? WHERE name = 'vm_view'",
                   (created.id,))
    found = verify_read_models(services)
    assert [(d.where, d.kind) for d in found] == [("read model vm_view", "tracking")]
    assert found[0].detail.startswith(f"is at position {created.id}, behind its rows")
    assert "vmledger rebuild vm_view" in found[0].detail
    _forget_kept_folds(services)
    with pytest.raises(TrackingBehindError, match="tracking is behind its rows") as raised:
        services.projections.catch_up(["vm_view"])
    assert "gap" not in str(raised.value) and "vmledger rebuild vm_view" in str(raised.value)
    assert not any(other in str(raised.value) for other in others)


@pytest.mark.parametrize("table, column, key", [
    ("job_view", "position", "vm_uuid"),
    ("vm_transitions", "position", "vm_uuid"),
    ("vm_view", "version", "uuid"),
])
def test_a_row_edited_ahead_of_the_log_is_that_row_not_the_tracking(services, table, column,
                                                                    key):
    """A row's ``position`` (or ``version``) edited past anything its stream holds was said to
    be the tracking row behind its rows (``tracking: read model job_view: is at position P,
    behind its rows``) though the tracking row was untouched (auditor tester): it is that
    row's edited column, as any other edit is."""
    vm_uuid = _vm_with_history(services)
    _vm_with_history(services)
    with services.db.transaction() as tx:
        tx.execute(f"SELECT * FROM {table} WHERE {key} = ? ORDER BY {column} LIMIT 1",
                   (vm_uuid,))
        row = tx.fetchone()
        tx.execute(f"UPDATE {table} SET {column} = {column} + 100000 WHERE {key} = ? "
                   f"AND {column} = ?", (vm_uuid, row[column]))
    found = [(d.kind, d.detail) for d in verify_read_models(services)]
    assert found == [("read model", f"differs from a fresh fold in {column}")], found
