"""``vm_view``: events in, rows out; a rebuild gives the same rows as the live projection."""

from __future__ import annotations

import json

import pytest

from domain.errors import StreamGapError
from domain.states import Action, VmState
from domain.vm import Vm
from projections.db import Tx
from projections.vm_view import VmView, render_vm
from tests.builders import (
    LEASE, OWNER, T0, a_mix_of_commands_and_jobs, act, cause, create, new_vm, rows, run_head_job,
    settle,
)

SERVER = "0d3f4b6e-0000-4000-8000-0000000000aa"


def apply(services, events, first_position: int = 1) -> None:
    """Feed domain events straight into a VmView, as the runner would, in one transaction."""
    view = VmView(services.app.mapper.transcoder)
    with services.db.transaction() as tx:
        view.apply(tx, list(enumerate(events, first_position)))


def test_a_created_vm_becomes_one_row_with_its_filter_columns_and_body(services):
    vm = new_vm(alias="web", image_uuid="img-1")
    apply(services, vm.collect_events())
    [row] = rows(services, "vm_view")
    assert (row["uuid"], row["owner_uuid"], row["state"], row["alias"], row["version"]) == (
        str(vm.id), OWNER, "provisioning", "web", 2)
    assert row["server_uuid"] is None and row["image_uuid"] == "img-1" and row["ram"] == 1024
    body = json.loads(row["body"])
    assert body == render_vm(vm)
    assert body["queued_job_uuids"] == [vm.head_job["uuid"]] and body["active_job_uuid"] is None
    assert body["desired_state"] == "running"


def test_later_events_fold_onto_the_stored_row_in_later_batches(services):
    vm = new_vm()
    apply(services, vm.collect_events())
    job_uuid = vm.head_job["uuid"]
    run_head_job(vm, lambda v: v.record_provisioned(SERVER, cause=cause()))
    apply(services, vm.collect_events(), first_position=3)
    [row] = rows(services, "vm_view")
    assert (row["state"], row["server_uuid"], row["version"]) == ("running", SERVER, vm.version)
    body = json.loads(row["body"])
    assert body == render_vm(vm)
    assert job_uuid not in body["queued_job_uuids"] and body["active_job_uuid"] is None


def test_a_running_job_shows_as_the_active_job(services):
    vm = new_vm()
    job_uuid = vm.head_job["uuid"]
    vm.start_job(job_uuid, worker="w", now=T0, lease_expires_at=T0 + LEASE, cause=cause())
    apply(services, vm.collect_events())
    body = json.loads(rows(services, "vm_view")[0]["body"])
    assert body["active_job_uuid"] == job_uuid and body["queued_job_uuids"] == []


def test_quarantine_shows_the_operator_owner_and_the_previous_owner(services):
    vm = new_vm()
    vm.record_quarantined("stuck", cause=cause())
    apply(services, vm.collect_events())
    [row] = rows(services, "vm_view")
    body = json.loads(row["body"])
    assert row["state"] == VmState.QUARANTINED and row["owner_uuid"] != OWNER
    assert body["quarantine"]["previous_owner_uuid"] == OWNER
    assert body["quarantine"]["since"].endswith("Z")


def test_an_event_of_a_vm_the_view_never_saw_created_is_caught(services):
    vm = new_vm()
    vm.collect_events()
    vm.record_quarantined("stuck", cause=cause())
    # a gap before it, as a stream whose first events were deleted has (it said only that
    # "an event was missed", naming neither stream nor version)
    with pytest.raises(StreamGapError, match=f"stream {vm.id} has a gap: its event of "
                       "version 3 is its first"):
        apply(services, vm.collect_events(), first_position=3)
    assert rows(services, "vm_view") == []


def test_a_skipped_event_is_caught_by_the_version_check(services):
    vm = new_vm()
    apply(services, vm.collect_events())
    vm.update_metadata({"alias": "first"}, cause=cause())
    vm.update_metadata({"alias": "second"}, cause=cause())
    _skipped, second = vm.collect_events()
    with pytest.raises(StreamGapError, match=f"stream {vm.id} has a gap: its event of "
                       "version 4 follows version 2"):
        apply(services, [second], first_position=4)
    assert rows(services, "vm_view")[0]["version"] == 2


def test_commands_and_jobs_show_in_the_view_once_caught_up(services):
    accepted = create(services, alias="a")
    services.projections.catch_up()
    assert services.vms.get(accepted.vm_uuid)["state"] == "provisioning"
    settle(services)
    act(services, accepted.vm_uuid, Action.UPDATE, args={"alias": "b"})
    settle(services)
    got = services.vms.get(accepted.vm_uuid)
    assert got["state"] == "running" and got["alias"] == "b"
    assert got["version"] == services.commands.load(accepted.vm_uuid).version
    assert got == render_vm(services.commands.load(accepted.vm_uuid))


def test_a_rebuilt_vm_view_equals_the_live_one_row_for_row(services):
    vm_uuids = a_mix_of_commands_and_jobs(services)
    live = rows(services, "vm_view")
    assert len(live) == len(vm_uuids)
    services.projections.rebuild(["vm_view"])
    assert rows(services, "vm_view") == live


def test_every_row_equals_the_vm_folded_from_its_stream(services):
    a_mix_of_commands_and_jobs(services)
    for row in rows(services, "vm_view"):
        vm: Vm = services.commands.load(row["uuid"])
        assert json.loads(row["body"]) == render_vm(vm)
        assert row["version"] == vm.version and row["state"] == vm.state


def test_a_batch_reads_no_row_of_a_vm_it_creates(services, monkeypatch):
    # Its rows are made in the batch: a read of them finds nothing and costs a round trip
    # (docs/performance.md, P5: half the passes under the P1 load sent one).
    vm_uuid = create(services).vm_uuid
    assert services.worker.run_vm(vm_uuid)  # its job runs: Provisioned, a state event
    read: list[tuple[str, set[str]]] = []
    real = Tx.submit_rows_by_key

    def noted(tx, table, column, keys, **kwargs):
        keys = set(keys)
        if keys:
            read.append((table, keys))
        return real(tx, table, column, keys, **kwargs)

    monkeypatch.setattr(Tx, "submit_rows_by_key", noted)
    services.projections.catch_up()  # one batch: Created to Provisioned
    assert services.vms.get(vm_uuid)["state"] == "running"
    assert [table for table, keys in read if vm_uuid in keys] == []
