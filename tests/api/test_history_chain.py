"""An auditor recomputes every hash-chain link of a VM from its HTTP history alone, with
``hashlib`` and ``json`` and the recipe of docs/api.md ("Recomputing a link"): each entry
shows every input of its link (a tester: the history showed the class name, not the topic
hashed, and the time to the millisecond, not the microsecond hashed)."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any
from uuid import UUID

from tests.api.helpers import act_and_wait, create_running_vm
from tests.builders import insert_v1_created

GENESIS = "0" * 64


def recomputed(previous: str, vm_uuid: str, entry: dict[str, Any]) -> str:
    """docs/api.md's recipe, word for word."""
    text = json.dumps([previous, vm_uuid, entry["version"], entry["topic"], entry["chained"]],
                      sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def relinks(vm_uuid: str, history: list[dict[str, Any]]) -> bool:
    """Whether every entry's recomputed link is its ``data.chain``, from the first."""
    previous = GENESIS
    for entry in history:
        if recomputed(previous, vm_uuid, entry) != entry["data"]["chain"]:
            return False
        previous = entry["data"]["chain"]
    return True


def test_every_link_of_a_vms_http_history_recomputes_from_the_entries(client) -> None:
    vm_uuid = create_running_vm(client, alias="audited",
                                tags={"name": "zoë-名前", "ratio": 1.5, "n": 7})
    act_and_wait(client, vm_uuid, "stop")
    act_and_wait(client, vm_uuid, "update", json={"customer_metadata": {"k": "v\u2028"}})
    act_and_wait(client, vm_uuid, "start")
    history = client.get(f"/vms/{vm_uuid}/history").json()
    assert len(history) > 10 and relinks(vm_uuid, history)
    for entry in history:
        # the inputs are the entry's own: its topic, its cause, its time to the microsecond
        assert entry["topic"].startswith("vm.")
        assert entry["chained"]["cause"] == entry["cause"]
        shown, exact = entry["timestamp"], entry["chained"]["timestamp"]
        assert exact.replace(" ", "T")[:23] == shown[:23] and exact.endswith("+00:00")
        fields = set(entry["chained"]) - {"timestamp", "cause"}
        assert fields == set(entry["data"]) - {"chain"}
    stopped = next(e for e in history if e["type"] == "Stopped")
    assert stopped["topic"] == "vm.stopped"


def test_one_field_altered_breaks_its_link(client) -> None:
    vm_uuid = create_running_vm(client)
    act_and_wait(client, vm_uuid, "stop")
    history = client.get(f"/vms/{vm_uuid}/history").json()
    assert relinks(vm_uuid, history)
    started = next(i for i, e in enumerate(history) if e["type"] == "JobStarted")
    edits = [
        lambda e: e.update(topic="vm.started"),
        lambda e: e.update(version=e["version"] + 1),
        lambda e: e["chained"].update(timestamp=e["chained"]["timestamp"].replace(".", ".9", 1)),
        lambda e: e["chained"]["cause"].update(actor="someone else"),
        lambda e: e["chained"].update(attempt=e["chained"]["attempt"] + 1),
        lambda e: e["chained"].update(lease_expires_at="2026-01-01 00:00:00+00:00"),
    ]
    for edit in edits:
        altered = copy.deepcopy(history)
        edit(altered[started])
        assert not relinks(vm_uuid, altered)
    assert not relinks(str(UUID(int=1)), history)  # another stream's


def test_the_history_command_shows_the_same_entries(client, settings) -> None:
    from tests.cli import vmledger

    vm_uuid = create_running_vm(client)
    history = client.get(f"/vms/{vm_uuid}/history").json()
    printed = vmledger("history", vm_uuid, database_url=settings.database_url)
    assert printed.returncode == 0, printed.stderr
    lines = [json.loads(line) for line in printed.stdout.splitlines()]
    assert lines == history and relinks(vm_uuid, lines)


def test_an_event_stored_before_its_class_gained_a_field_recomputes_as_stored(
        client, services) -> None:
    """A version 1 ``Created`` (before VMs mounted volumes): ``data`` shows it upcast, with no
    volumes, and ``chained`` holds it as it was hashed, without them."""
    vm_id = UUID("3f1c9c2e-0000-4000-8000-00000000f002")
    insert_v1_created(services.app, vm_id)
    [entry] = client.get(f"/vms/{vm_id}/history").json()
    assert entry["data"]["volumes"] == [] and "volumes" not in entry["chained"]
    assert relinks(str(vm_id), [entry])
