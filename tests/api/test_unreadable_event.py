"""An event that cannot be read (its topic names no class, or its state does not decode) is
damage to the log like a gap: every load past it answers 503 naming the stream, the version
and that the log needs repair, not 500 with a traceback (tester D, bug 6)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from projections.formats import rfc3339
from tests.api.helpers import assert_error, create_running_vm
from tests.cli import vmledger
from tests.tampering import set_event_column

EDITS = {"topic": ("topic", "vm.bogus"), "state": ("state", b"\xff not json")}


@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
def test_an_unreadable_event_is_503_naming_stream_and_version(client, services, edit) -> None:
    vm_uuid = create_running_vm(client)
    set_event_column(services, vm_uuid, 3, *edit)
    for path, params in ((f"/vms/{vm_uuid}", {"version": 4}),
                         (f"/vms/{vm_uuid}", {"at": rfc3339(datetime.now(UTC))}),
                         (f"/vms/{vm_uuid}/history", {})):
        body = assert_error(client.get(path, params=params), 503, "Unavailable")
        assert f"stream {vm_uuid}" in body["message"] and "version 3" in body["message"], body
        assert "the log needs repair" in body["message"], body
    assert client.get(f"/vms/{vm_uuid}", params={"version": 2}).status_code == 200


def test_an_instant_before_an_unreadable_event_is_served(client, services) -> None:
    # its version is found from the events before the damage, when one of them is later
    vm_uuid = create_running_vm(client)
    events = client.get(f"/vms/{vm_uuid}/history").json()
    queued = events[1]["timestamp"]  # the provision's steps come later
    then = max(e["version"] for e in events if e["timestamp"] <= queued)
    set_event_column(services, vm_uuid, 9, *EDITS["topic"])
    response = client.get(f"/vms/{vm_uuid}", params={"at": queued})
    assert response.status_code == 200, response.text
    assert response.json()["version"] == then < 8


def test_vmledger_history_of_an_unreadable_event_is_one_line(client, services) -> None:
    vm_uuid = create_running_vm(client)
    set_event_column(services, vm_uuid, 3, *EDITS["topic"])
    done = vmledger("history", vm_uuid, database_url=services.settings.database_url,
                    env={"VMLEDGER_LOG_FORMAT": "text"})
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"vmledger history: stream {vm_uuid} has an unreadable event at "
                           "version 3") and "the log needs repair" in line, done.stderr


@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
def test_vmledger_rebuild_meeting_an_unreadable_event_ends_in_one_line(client, services,
                                                                       edit) -> None:
    # found by a tester: UnreadableEventError ended the rebuild in a traceback
    vm_uuid = create_running_vm(client)
    set_event_column(services, vm_uuid, 3, *edit)
    done = vmledger("rebuild", database_url=services.settings.database_url)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"vmledger rebuild: stream {vm_uuid} has an unreadable event at "
                           "version 3") and "the log needs repair" in line, done.stderr
