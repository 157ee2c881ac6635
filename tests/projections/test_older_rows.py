"""``vm_view`` rows an older version of the ``Vm`` class wrote (class version 2: no
``node_seen``), as every row of a VM with no event since an upgrade is. Found by a reviewer:
``vmledger audit verify`` compared each row's fold byte for byte with a fresh fold of the
current class and reported every such row as "differs from a fresh fold in snapshot", the
wording of an edited row; then, after the upgrade to class version 6, it compared the row's
fold upcast, whose ``claimed_servers`` is a guess (a failed provision's: none, where a fresh
fold has the server it claimed), and the runner folded on from that guess. The audit now
compares such a row on the fields its version kept (projections/vm_view_folds.py ``said``),
and the runner folds the VM afresh from the log rather than thawing the row."""

from __future__ import annotations

import logging

from domain.states import Action

from domain.vm import Vm
from service.audit.read_models import verify_read_models
from tests.builders import act, create, settle
from tests.integration.test_audit import _vm_with_history
from tests.projections.test_edited_rows import (
    _forget_kept_folds, _rename, _set_snapshot, _snapshot_of,
)


# The fields each class version of ``Vm`` added to its state (domain/vm.py)
_ADDED = {3: ["node_seen"], 4: ["addresses_kept"], 5: ["copy_may_be_on"],
          6: ["claimed_servers"]}


def _as_version(services, vm_uuid: str, version: int, **edits) -> None:
    """Rewrite the VM's row's fold in the form class ``version`` wrote (with ``edits``)."""
    transcoder = services.app.mapper.transcoder
    state = transcoder.decode(_snapshot_of(services, vm_uuid))
    assert state["class_version"] == Vm.class_version == 6
    state["class_version"] = version
    for later in range(version + 1, Vm.class_version + 1):
        for field in _ADDED[later]:
            del state[field]
    state.update(edits)
    _set_snapshot(services, vm_uuid, transcoder.encode(state))


def _as_version_2(services, vm_uuid: str, **edits) -> None:
    assert services.commands.load(vm_uuid).node_seen is None
    _as_version(services, vm_uuid, 2, **edits)


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


def test_the_runner_folds_afresh_from_the_log_a_vm_whose_row_an_older_version_wrote(
        services, monkeypatch, caplog):
    vm_uuid = _vm_before_the_upgrade(services, monkeypatch)
    _as_version_2(services, vm_uuid)
    _forget_kept_folds(services)
    # not taken for an edited row (no warning), but not thawed either: folded from the log
    with caplog.at_level(logging.INFO, logger="vmledger.projections.vm_view"):
        _rename(services, vm_uuid, "renamed")
        settle(services)
    assert _refolded(caplog) == [vm_uuid]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    vm = services.vms.get(vm_uuid)
    assert vm["alias"] == "renamed"
    assert vm["version"] == services.commands.load(vm_uuid).version
    state = services.app.mapper.transcoder.decode(_snapshot_of(services, vm_uuid))
    assert state["class_version"] == Vm.class_version
    assert verify_read_models(services) == []


def _refolded(caplog) -> list[str]:
    """The VMs the runner said (at INFO) it folded afresh for a row an older version wrote."""
    return [r.args[1] for r in caplog.records
            if r.levelno == logging.INFO and "an older version" in r.getMessage()]


def _failed_provision(services) -> str:
    """A VM whose provision failed: it claimed a server and gave the claim back."""
    vm_uuid = create(services, internal_metadata={"force_provision_failure": True}).vm_uuid
    settle(services)
    vm = services.commands.load(vm_uuid)
    assert vm.state == "failed" and vm.claim is None and vm.server_uuid is None
    assert len(vm.claimed_servers) == 1
    return vm_uuid


def test_a_failed_provision_an_older_version_wrote_audits_clean_and_folds_on_from_the_log(
        services, caplog):
    # The upcast to version 6 guesses claimed_servers from server_uuid and the claim: none
    # for a failed provision, where a fresh fold has the server it claimed (reviewer)
    failed = _failed_provision(services)
    running = create(services).vm_uuid
    settle(services)
    for vm_uuid in (failed, running):
        _as_version(services, vm_uuid, 3)
    assert verify_read_models(services) == []
    _forget_kept_folds(services)
    with caplog.at_level(logging.INFO, logger="vmledger.projections.vm_view"):
        act(services, failed, Action.DESTROY)
        settle(services)
    state = services.app.mapper.transcoder.decode(_snapshot_of(services, failed))
    assert state["claimed_servers"] == services.commands.load(failed).claimed_servers
    assert verify_read_models(services) == []
    assert failed in _refolded(caplog)
    # no warning of the read models (the failed provision's own job line is a warning)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING
                and r.name.startswith("vmledger.projections")]


def test_an_older_rows_fields_its_version_kept_are_still_compared(services):
    failed = _failed_provision(services)
    _as_version(services, failed, 5, copy_may_be_on=["edited"])
    found = [(d.where, d.kind, d.detail) for d in verify_read_models(services)]
    assert found == [(f"vm_view row {failed}", "read model",
                      "differs from a fresh fold in snapshot")]
