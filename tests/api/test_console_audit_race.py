"""The console's audit while VMs are being written (console tester, bug 1): each fold stops
at the position the live read model has reached, whose rows are read in the same snapshot,
so no write, however it interleaves with the audit, makes a finding. It read the VMs'
streams first and the read models later, and reported the events appended in between as
"read model differs"."""

from __future__ import annotations

import re
import threading

from fastapi.testclient import TestClient

import service.audit.streams as streams
from service.container import Services
from tests.api.helpers import act, create_running_vm

READ_MODELS = ("vm_view", "job_view", "volume_mounts", "analytics")


def _findings(text: str) -> list[str]:
    return re.findall(r"<li>([^<]*)</li>", text)


def test_an_event_appended_between_reading_the_stream_and_the_read_models(
        services: Services, client: TestClient, monkeypatch) -> None:
    vm_uuid = create_running_vm(client)
    read = streams.select_stream
    written = []

    def then_write(recorder, stream, *args, **kwargs):
        events = read(recorder, stream, *args, **kwargs)
        if not written:  # once: a command, applied to every read model
            written.append(act(client, vm_uuid, "update", json={"alias": "between"}))
            assert services.projections.wait_for(services.commands.head_position(),
                                                 READ_MODELS, timeout=10)
        return events

    monkeypatch.setattr(streams, "select_stream", then_write)
    response = client.post("/console/fragments/audit", params={"vm_uuid": vm_uuid})
    assert written and written[0].status_code == 202
    assert response.status_code == 200, response.text
    assert 'data-failed="0"' in response.text, _findings(response.text)


def test_audits_while_commands_run_find_nothing(services: Services,
                                                client: TestClient) -> None:
    vms = [create_running_vm(client) for _ in range(3)]
    writer = TestClient(client.app)  # its own client: this one serves the audits
    stop = threading.Event()
    errors: list[str] = []

    def write() -> None:
        turn = 0
        while not stop.is_set():
            vm_uuid = vms[turn % len(vms)]
            action = ("update", "stop", "start")[turn % 3]
            response = act(writer, vm_uuid, action, **(
                {"json": {"alias": f"a{turn}"}} if action == "update" else {}))
            if response.status_code not in (202, 409):  # 409: a job of it still queued
                errors.append(response.text)
            turn += 1

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        for run in range(12):
            params = ({"vm_uuid": vms[run % len(vms)]} if run % 2 else
                      {"after": 0, "limit": 200})
            response = client.post("/console/fragments/audit", params=params)
            assert response.status_code == 200, response.text
            assert 'data-failed="0"' in response.text, (params, _findings(response.text))
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not errors, errors[:3]
