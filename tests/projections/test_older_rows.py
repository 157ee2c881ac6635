"""``vm_view`` rows an older version of the ``Vm`` class wrote (class version 2: no
``node_seen``), as every row of a VM with no event since the upgrade to version 3 is. Found by
a reviewer: ``vmledger audit verify`` compared each row's fold byte for byte with a fresh fold
of the current class and reported every such row as "differs from a fresh fold in snapshot",
the wording of an edited row. The audit compares the row's fold upcast, as the runner thaws it
(projections/vm_view_folds.py ``as_current``), and the runner keeps using such rows."""

from __future__ import annotations


from domain.vm import Vm
from service.audit.read_models import verify_read_models
from tests.integration.test_audit import _vm_with_history
from tests.projections.test_edited_rows import (
    _forget_kept_folds, _renamed_and_applied, _set_snapshot, _snapshot_of,
)


def _as_version_2(services, vm_uuid: str, **edits) -> None:
    """Rewrite the VM's row's fold in the form class version 2 wrote (with ``edits``)."""
    transcoder = services.app.mapper.transcoder
    state = transcoder.decode(_snapshot_of(services, vm_uuid))
    assert state["class_version"] == Vm.class_version == 6 and state["node_seen"] is None
    state["class_version"] = 2
    del state["node_seen"], state["addresses_kept"], state["copy_may_be_on"]
    del state["claimed_servers"]
    state.update(edits)
    _set_snapshot(services, vm_uuid, transcoder.encode(state))


def _vm_before_the_upgrade(services, monkeypatch) -> str:
    # A VM whose events an older version wrote: no job step recorded a NodeObserved
    monkeypatch.setattr(Vm, "record_node_seen", lambda self, *a, **k: False)
    vm_uuid = _vm_with_history(services)
    services.projections.catch_up()
    monkeypatch.undo()
    return vm_uuid


def test_a_row_an_older_version_wrote_audits_clean(services, monkeypatch):
    vm_uuid = _vm_before_the_upgrade(services, monkeypatch)
    assert verify_read_models(services) == []
    _as_version_2(services, vm_uuid)
    assert verify_read_models(services) == []


def test_an_edited_row_of_an_older_version_is_still_found(services, monkeypatch):
    vm_uuid = _vm_before_the_upgrade(services, monkeypatch)
    for edits in ({"alias": "edited"}, {"node_seen": {"server_uuid": "x", "seq": 9}},
                  {"class_version": 1, "state_since": "edited"}):
        _as_version_2(services, vm_uuid, **edits)
        found = [(d.where, d.kind, d.detail) for d in verify_read_models(services)]
        assert found == [(f"vm_view row {vm_uuid}", "read model",
                          "differs from a fresh fold in snapshot")], edits
        _written_afresh(services, vm_uuid)


def _written_afresh(services, vm_uuid: str) -> None:
    """The row's fold written afresh by the current class (the fold of its VM)."""
    vm = services.commands.load(vm_uuid)
    view = services.projections.read_models["vm_view"]
    _set_snapshot(services, vm_uuid, view.folded_state(vm))
    assert verify_read_models(services) == []


def test_the_runner_folds_the_next_event_onto_a_row_an_older_version_wrote(
        services, monkeypatch, caplog):
    vm_uuid = _vm_before_the_upgrade(services, monkeypatch)
    _as_version_2(services, vm_uuid)
    _forget_kept_folds(services)
    # thawed as it is, upcast: not taken for an edited row and folded afresh
    assert _renamed_and_applied(services, vm_uuid, caplog) == []
    vm = services.vms.get(vm_uuid)
    assert vm["alias"] == "renamed"
    assert vm["version"] == services.commands.load(vm_uuid).version
    state = services.app.mapper.transcoder.decode(_snapshot_of(services, vm_uuid))
    assert state["class_version"] == Vm.class_version
    assert verify_read_models(services) == []
