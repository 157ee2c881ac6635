"""``audit verify`` on edits that ``==`` does not see, and on tracking rows it used to pass
(tester D, bugs 4 and 5): a resealed snapshot whose values changed only their type, and a
read model whose position is past the log's head."""

from __future__ import annotations

from uuid import UUID

import pytest

from domain.vm import Vm
from service.audit.snapshots import verify_snapshots
from service.commands.snapshot_seal import SEAL, seal
from tests.integration.test_audit import _version_of, _vm_with_history
from tests.integration.test_audit_findings import _edit_snapshot


def _reseal(services, vm_uuid: str) -> None:
    """Recompute the stored snapshot's seal, as someone who knows the format would."""
    [snapshot] = services.app.snapshots.get(UUID(vm_uuid))
    old = snapshot.state[SEAL]
    _edit_snapshot(services, vm_uuid, old.encode(),
                   seal(services.app.mapper.transcoder, snapshot).encode())


@pytest.mark.parametrize("old, new", [(b'"ram":256', b'"ram":256.0'),
                                      (b'"ram":256', b'"ram":256e0')])
def test_a_resealed_snapshot_whose_value_changed_only_its_type_is_named(services, old, new):
    vm_uuid = _vm_with_history(services)
    version = _version_of(services, vm_uuid, Vm.MetadataUpdated)
    services.app.take_snapshot(UUID(vm_uuid), version=version)
    _edit_snapshot(services, vm_uuid, old, new)
    _reseal(services, vm_uuid)
    found = verify_snapshots(services.app)
    assert [(d.where, d.version, d.kind) for d in found] == [
        (f"snapshot {vm_uuid}", version, "snapshot")]
    assert "ram" in found[0].detail


def test_a_resealed_snapshot_with_true_for_1_is_named(services):
    vm_uuid = _vm_with_history(services)
    version = _version_of(services, vm_uuid, Vm.MetadataUpdated)
    services.app.take_snapshot(UUID(vm_uuid), version=version)
    [snapshot] = services.app.snapshots.get(UUID(vm_uuid))
    ones = [k for k, v in snapshot.state.items() if v == 1 and type(v) is int]
    nested = [k for k, v in snapshot.state.items() if isinstance(v, dict)
              and any(x == 1 and type(x) is int for x in v.values())]
    assert ones or nested, snapshot.state
    key = (ones or nested)[0]
    if ones:
        _edit_snapshot(services, vm_uuid, f'"{key}":1'.encode(), f'"{key}":true'.encode())
    else:
        inner = next(k for k, x in snapshot.state[key].items() if x == 1 and type(x) is int)
        _edit_snapshot(services, vm_uuid, f'"{inner}":1'.encode(), f'"{inner}":true'.encode())
    _reseal(services, vm_uuid)
    found = verify_snapshots(services.app)
    assert [(d.version, d.kind) for d in found] == [(version, "snapshot")]
    assert key in found[0].detail
