"""An event moved to a log position outside the log (0 or below; its positions start at 1)
was reported ``missing`` by the audit, listed at position 0 by a VM's history, and skipped
by the change streams, which read the log by position (auditor tester). It is damage to the
log: the audit names it moved outside the log, and a history reaching it answers 503 naming
it (docs/operations.md, "A damaged stream")."""

from __future__ import annotations

import pytest

from service.audit.verify import verify_chains
from tests.api.helpers import assert_error, create_running_vm
from tests.cli import vmledger
from tests.tampering import positions, set_positions

MOVED = 4


def _findings(services, vm_uuid: str) -> list[tuple[int | None, str]]:
    found = verify_chains(services.app)
    assert all(d.where == f"stream {vm_uuid}" for d in found), found
    return sorted((d.version, d.kind) for d in found)


@pytest.mark.parametrize("position", [0, -3])
@pytest.mark.parametrize("version", [1, MOVED])
def test_audit_names_an_event_moved_outside_the_log_not_missing(client, services, position,
                                                                  version) -> None:
    vm_uuid = create_running_vm(client)
    set_positions(services, vm_uuid, {version: position})
    assert _findings(services, vm_uuid) == [(version, "out of order")]
    [finding] = verify_chains(services.app)
    assert finding.detail.startswith(f"at position {position}, outside the log"), finding


def test_a_history_reaching_an_event_outside_the_log_is_503_naming_it(client, services) -> None:
    vm_uuid = create_running_vm(client)
    set_positions(services, vm_uuid, {MOVED: 0})
    body = assert_error(client.get(f"/vms/{vm_uuid}/history"), 503, "Unavailable")
    assert (f"stream {vm_uuid} has its event of version {MOVED} at log position 0, outside "
            "the log") in body["message"], body
    assert "the log needs repair" in body["message"], body
    served = client.get(f"/vms/{vm_uuid}/history", params={"limit": MOVED - 1})
    assert served.status_code == 200 and all(e["position"] >= 1 for e in served.json())
    assert positions(services, vm_uuid)[MOVED] == 0


def test_vmledger_history_of_an_event_outside_the_log_is_one_line(client, services) -> None:
    vm_uuid = create_running_vm(client)
    set_positions(services, vm_uuid, {MOVED: -3})
    done = vmledger("history", vm_uuid, database_url=services.settings.database_url,
                    env={"VMLEDGER_LOG_FORMAT": "text"})
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"vmledger history: stream {vm_uuid} has its event of version "
                           f"{MOVED} at log position -3, outside the log"), done.stderr


def test_the_read_models_fresh_fold_meets_the_gap_it_leaves(client, services) -> None:
    # folded by position, as a rebuild folds the log, the stream skips the event
    from service.audit.read_models import verify_read_models

    vm_uuid = create_running_vm(client)
    set_positions(services, vm_uuid, {MOVED: 0})
    folds = [d for d in verify_read_models(services) if d.kind == "fold"]
    assert [(d.where, d.version) for d in folds] == [(f"stream {vm_uuid}", MOVED + 1)], folds
