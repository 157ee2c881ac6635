"""A stored event the VM's fold cannot apply (its topic edited to another VM event's, which
the VM's state refuses, or to a class that is no event of a stream) is damage to the log
like a gap: every load whose fold crosses it answers 503 naming the stream and the version
and saying the log needs repair (docs/operations.md, "A damaged stream"); a version before it
is served. Found by a tester: the domain's refusal raised out of the fold answered 409
``InvalidTransition`` describing a running VM, the snapshot's class a 500."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from projections.formats import rfc3339
from tests.api.helpers import (
    act_and_wait, assert_error, create_running_vm, history_types, wait_job,
)
from tests.cli import vmledger
from tests.tampering import set_event_column

EDITS = {"refused": "vm.started", "no event's class": "eventsourcing.domain:Snapshot"}


@pytest.fixture(params=EDITS.values(), ids=EDITS.keys())
def refused(request, client, services) -> tuple[str, int]:
    """A destroyed VM whose stream's event ``Stopped`` (that of its stop, after it ran) was
    given another topic behind the service's back; the VM's uuid and that version."""
    vm_uuid = create_running_vm(client)
    act_and_wait(client, vm_uuid, "stop")
    deleted = client.delete(f"/vms/{vm_uuid}")
    assert deleted.status_code == 202, deleted.text
    wait_job(client, deleted.json()["job_uuid"])
    version = history_types(client, vm_uuid).index("Stopped") + 1
    set_event_column(services, vm_uuid, version, "topic", request.param)
    return vm_uuid, version


def _assert_needs_repair(response, vm_uuid: str, version: int) -> None:
    body = assert_error(response, 503, "Unavailable")
    assert body["message"].startswith(f"stream {vm_uuid} has an event its fold cannot apply "
                                      f"at version {version} ("), body
    assert "the log needs repair" in body["message"], body


def test_a_version_before_the_event_is_served_and_every_later_one_is_503(
        client, restarted, refused) -> None:
    vm_uuid, version = refused
    for http in (client, restarted):  # the process that wrote the stream, and a new one
        before = http.get(f"/vms/{vm_uuid}", params={"version": version - 1})
        assert before.status_code == 200, before.text
        assert before.json()["version"] == version - 1
        assert before.headers["ETag"] == f'"{version - 1}"'
        for later in (version, version + 1):
            _assert_needs_repair(http.get(f"/vms/{vm_uuid}", params={"version": later}),
                                 vm_uuid, version)
        _assert_needs_repair(http.get(f"/vms/{vm_uuid}", params={
            "at": rfc3339(datetime.now(UTC))}), vm_uuid, version)


def test_commands_and_the_console_of_a_new_process_answer_503(restarted, refused) -> None:
    # the process that wrote the stream decides on its cached fold (docs/operations.md);
    # a new one folds the stream, and must not answer the refusal as the client's
    vm_uuid, version = refused
    for response in (restarted.post(f"/vms/{vm_uuid}", params={"action": "start"}),
                     restarted.delete(f"/vms/{vm_uuid}"),
                     restarted.get(f"/console/fragments/vms/{vm_uuid}")):
        _assert_needs_repair(response, vm_uuid, version)


def test_vmledger_rebuild_meeting_the_event_ends_in_one_line(settings, refused) -> None:
    vm_uuid, _ = refused
    done = vmledger("rebuild", database_url=settings.database_url)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("vmledger rebuild: ") and f"stream {vm_uuid} " in line, line
    assert "the log needs repair" in line, line
