"""A stream whose first event was deleted behind the service's back has a gap before its
second: every load that folds it answers 503 with the fold's words and that the log needs
repair, as for a gap further on (docs/operations.md, "A damaged stream"), and the commands
that read it end in one line with status 1. Found by a tester: the library's bare ``assert``
made each a 500, ``vmledger rebuild`` a traceback, ``vmledger history`` printed the stream
from version 2 and exited 0."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from projections.formats import rfc3339
from service.api.app import create_app
from service.container import Services
from tests.api.conformance import conforming
from tests.api.helpers import assert_error, create_running_vm
from tests.cli import vmledger
from tests.tampering import delete_event


def _gap(vm_uuid: str) -> str:
    return f"stream {vm_uuid} has a gap: its event of version 2 is its first"


@pytest.fixture
def first_deleted(client, services) -> str:
    """A running VM whose stream's first event was deleted; its uuid."""
    vm_uuid = create_running_vm(client)
    delete_event(services, vm_uuid, 1)
    return vm_uuid


def _assert_needs_repair(response, vm_uuid: str) -> None:
    body = assert_error(response, 503, "Unavailable")
    assert body["message"].startswith(_gap(vm_uuid)), body
    assert "the log needs repair" in body["message"], body


def test_loads_that_fold_the_stream_answer_503_naming_the_gap(client, first_deleted) -> None:
    now = rfc3339(datetime.now(UTC))
    for path, params in ((f"/vms/{first_deleted}", {"version": 3}),
                         (f"/vms/{first_deleted}", {"at": now}),
                         (f"/vms/{first_deleted}/history", {}),
                         (f"/console/fragments/vms/{first_deleted}", {})):
        _assert_needs_repair(client.get(path, params=params), first_deleted)


def test_a_restarted_service_answers_503_to_its_commands_and_console(
        settings, first_deleted) -> None:
    # the service that wrote the stream decides on its cached fold; a new process folds it
    restarted = Services.build(settings)
    try:
        with conforming(TestClient(create_app(services=restarted, background=False))) as http:
            _assert_needs_repair(http.post(f"/vms/{first_deleted}", params={"action": "stop"}),
                                 first_deleted)
            _assert_needs_repair(http.get(f"/console/fragments/vms/{first_deleted}"),
                                 first_deleted)
    finally:
        restarted.close()


@pytest.mark.parametrize(("command", "said"), [
    (("history", "{vm}"), "vmledger history: {gap}: the log needs repair"),
    (("rebuild",), "vmledger rebuild: {gap}: the log needs repair"),
], ids=["history", "rebuild"])
def test_a_command_reading_the_stream_ends_in_one_line(settings, first_deleted, command,
                                                       said) -> None:
    done = vmledger(*(part.format(vm=first_deleted) for part in command),
                    env={"VMLEDGER_LOG_FORMAT": "text"}, database_url=settings.database_url)
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()[-1:]
    assert "Traceback" not in done.stderr, done.stderr
    assert line.startswith(said.format(gap=_gap(first_deleted))), done.stderr
