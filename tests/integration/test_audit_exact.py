"""``audit verify`` on edits that ``==`` does not see, and on tracking rows it used to pass
(tester D, bugs 4 and 5): a resealed snapshot whose values changed only their type, and a
read model whose position is past the log's head."""

from __future__ import annotations

import logging
from uuid import UUID

import pytest

from domain.states import Action
from domain.vm import Vm, make_cause
from service.audit.read_models import verify_read_models
from service.audit.snapshots import verify_snapshots
from service.commands.snapshot_seal import SEAL, seal
from service.commands.versioning import NEWEST
from tests.cli import vmledger
from tests.integration.test_audit import _version_of, _vm_with_history
from tests.integration.test_audit_findings import _append_unfoldable_event
from tests.tampering import edit_snapshot


def _reseal(services, vm_uuid: str) -> None:
    """Recompute the stored snapshot's seal, as someone who knows the format would."""
    [snapshot] = services.app.snapshots.get(UUID(vm_uuid))
    old = snapshot.state[SEAL]
    edit_snapshot(services, vm_uuid, old.encode(),
                   seal(services.app.mapper.transcoder, snapshot).encode())


@pytest.mark.parametrize("old, new", [(b'"ram":256', b'"ram":256.0'),
                                      (b'"ram":256', b'"ram":256e0')])
def test_a_resealed_snapshot_whose_value_changed_only_its_type_is_named(services, old, new):
    vm_uuid = _vm_with_history(services)
    version = _version_of(services, vm_uuid, Vm.MetadataUpdated)
    services.app.take_snapshot(UUID(vm_uuid), version=version)
    edit_snapshot(services, vm_uuid, old, new)
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
        edit_snapshot(services, vm_uuid, f'"{key}":1'.encode(), f'"{key}":true'.encode())
    else:
        inner = next(k for k, x in snapshot.state[key].items() if x == 1 and type(x) is int)
        edit_snapshot(services, vm_uuid, f'"{inner}":1'.encode(), f'"{inner}":true'.encode())
    _reseal(services, vm_uuid)
    found = verify_snapshots(services.app)
    assert [(d.version, d.kind) for d in found] == [(version, "snapshot")]
    assert key in found[0].detail


def _push_past_head(services, name: str, by: int = 50) -> tuple[int, int]:
    """Move read model ``name``'s tracking row past the log's head, as an edit would."""
    head = services.projections.head()
    with services.db.transaction() as tx:
        tx.execute("INSERT INTO projection_tracking (name, position) VALUES (?, ?) "
                   "ON CONFLICT (name) DO UPDATE SET position = excluded.position",
                   (name, head + by))
    return head + by, head


def test_a_read_model_past_the_logs_head_is_a_finding(services):
    _vm_with_history(services)
    position, head = _push_past_head(services, "job_view")
    found = verify_read_models(services)
    assert [str(d) for d in found] == [
        (f"tracking: read model job_view: is at position {position}, past the log's head "
         f"{head}; `vmledger rebuild job_view` rebuilds it")]


def test_the_runner_refuses_a_read_model_past_the_head_and_logs_it_once(services, caplog):
    vm_uuid = _vm_with_history(services)
    position, head = _push_past_head(services, "job_view", by=2)
    with caplog.at_level(logging.WARNING):
        services.projections.catch_up()
        # more events than the gap: the log's head passes the edited position
        for alias in ("a", "b", "c", "d"):
            services.commands.request_action(vm_uuid, Action.UPDATE, behaviour=NEWEST,
                                             cause=make_cause(), args={"alias": alias})
        services.projections.catch_up()
        services.projections.catch_up()
    assert services.projections.head() > position
    # job_view applied none of them: it skipped nothing
    assert services.projections.position("job_view") == position
    assert services.projections.position("vm_view") == services.projections.head()
    lines = [r.getMessage() for r in caplog.records if "past the log's head" in r.getMessage()]
    assert lines == [(f"read model job_view is at position {position}, past the log's head "
                      f"{head}: it is not run; `vmledger rebuild job_view` rebuilds it")]
    services.projections.rebuild(["job_view"])
    services.projections.catch_up()
    assert services.projections.position("job_view") == services.projections.head()
    assert verify_read_models(services) == []


def test_ping_names_a_read_model_past_the_head(client, services):
    position, head = _push_past_head(services, "vm_view")
    body = client.get("/ping").json()
    assert body["projection_lag"]["vm_view"] == head - position < 0
    assert body["projection_past_head"] == ["vm_view"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_rebuild_names_an_event_it_cannot_fold_in_one_line(services, settings):
    """Tester B (doc mismatch 7): an event the fold refuses ended the rebuild in a traceback."""
    vm_uuid = _vm_with_history(services)
    version = _append_unfoldable_event(services, vm_uuid)
    failed = vmledger("rebuild", "vm_view", database_url=settings.database_url)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "Traceback" not in failed.stderr, failed.stderr
    [line] = [x for x in failed.stderr.splitlines() if x.startswith("vmledger rebuild:")]
    assert f"stream {vm_uuid} version {version}" in line
    assert "vm_view" in line and "vmledger audit verify" in line
