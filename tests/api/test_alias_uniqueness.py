"""Per-owner alias uniqueness, as VMAPI's ``validateUniqueAlias`` has it (CreateVm and
UpdateVm): an alias an active VM of the owner has (or an update of one is setting) is refused
``ValidationFailed`` naming ``alias`` (``Duplicate``), 409 in version 1 and 422 in version 2,
and nothing is appended; destroyed and failed VMs' aliases are free (domain/alias_hold.py,
docs/vmapi-compatibility.md). The rule is ``VMLEDGER_UNIQUE_ALIASES``'s, off by default: these
tests turn it on, but the ones that say otherwise."""

from __future__ import annotations

import uuid

import pytest

from domain.alias_hold import AliasHold, hold_id
from domain.vm import Vm, make_cause
from service.settings import Settings
from tests.api.helpers import (
    OTHER_OWNER, OWNER, V1, V2, act, act_and_wait, assert_error, create_running_vm, create_vm,
    get_vm, vm_body, wait_job,
)

DUPLICATE = [{"field": "alias", "code": "Duplicate",
              "message": "Already exists for this owner_uuid"}]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The tests' settings with ``VMLEDGER_UNIQUE_ALIASES`` on."""
    return settings.model_copy(update={"unique_aliases": True})


def _hold_events(services) -> list[str]:
    """The topics of every alias hold event in the log."""
    return [n.topic for n in services.app.recorder.select_notifications(0, 1_000_000)
            if n.topic.startswith("alias_hold.")]


def _destroy(client, vm_uuid: str) -> None:
    response = client.delete(f"/vms/{vm_uuid}")
    assert response.status_code == 202, response.text
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"


def _refused(response, headers: dict[str, str], message: str) -> None:
    status = 422 if headers is V2 else 409
    body = assert_error(response, status, "ValidationFailed")
    assert (body["message"], body["errors"]) == (message, DUPLICATE), body


@pytest.mark.parametrize("headers", [V1, V2], ids=["v1", "v2"])
def test_a_create_with_an_alias_an_active_vm_of_the_owner_has_is_refused(
        client, services, headers) -> None:
    create_running_vm(client, alias="web-1")  # its provision done: nothing else appends
    head = services.commands.head_position()
    response = client.post("/vms", json=vm_body(alias="web-1"), headers=headers)
    _refused(response, headers, "Invalid VM parameters")
    assert services.commands.head_position() == head  # nothing appended


def test_another_owner_may_have_the_same_alias(client) -> None:
    create_vm(client, alias="web-1")
    create_vm(client, alias="web-1", owner_uuid=OTHER_OWNER)


def test_the_alias_of_a_destroyed_vm_is_free(client) -> None:
    vm_uuid = create_running_vm(client, alias="web-1")
    response = client.delete(f"/vms/{vm_uuid}")
    assert response.status_code == 202, response.text
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"
    create_vm(client, alias="web-1")


def test_the_alias_of_a_vm_whose_provision_failed_is_free(client) -> None:
    failed = create_vm(client, alias="web-1",
                       internal_metadata={"force_provision_failure": True})
    assert wait_job(client, failed["job_uuid"])["execution"] == "failed"
    assert get_vm(client, failed["vm_uuid"])["state"] == "failed"
    create_running_vm(client, alias="web-1")


@pytest.mark.parametrize("headers", [V1, V2], ids=["v1", "v2"])
def test_an_update_to_an_alias_another_active_vm_has_is_refused(
        client, services, headers) -> None:
    create_running_vm(client, alias="web-1")
    vm_uuid = create_running_vm(client, alias="web-2")
    head = services.commands.head_position()
    response = act(client, vm_uuid, "update", headers=headers, json={"alias": "web-1"})
    _refused(response, headers, "Invalid VM update parameters")
    assert services.commands.head_position() == head


def test_an_update_to_the_vms_own_alias_is_accepted(client) -> None:
    vm_uuid = create_running_vm(client, alias="web-1")
    job = act_and_wait(client, vm_uuid, "update", json={"alias": "web-1", "tags": {"a": 1}})
    assert job["execution"] == "succeeded", job
    assert get_vm(client, vm_uuid)["alias"] == "web-1"


def test_a_renamed_vm_frees_its_old_alias_and_its_update_holds_the_new_one_at_once(
        paused) -> None:
    http = paused.http
    vm_uuid = create_vm(http, alias="web-1")["vm_uuid"]
    paused.run_jobs()
    response = act(http, vm_uuid, "update", json={"alias": "web-2"})
    assert response.status_code == 202, response.text
    # asked for: taken from the request on, though the job has not run
    _refused(http.post("/vms", json=vm_body(alias="web-2")), V1, "Invalid VM parameters")
    _refused(http.post("/vms", json=vm_body(alias="web-1")), V1, "Invalid VM parameters")
    paused.run_jobs()
    assert get_vm(http, vm_uuid)["alias"] == "web-2"
    create_vm(http, alias="web-1")
    _refused(http.post("/vms", json=vm_body(alias="web-2")), V1, "Invalid VM parameters")


def test_an_update_canceled_by_a_delete_frees_the_alias_it_asked_for(paused) -> None:
    http = paused.http
    vm_uuid = create_vm(http, alias="web-1")["vm_uuid"]
    assert act(http, vm_uuid, "update", headers=V2, json={"alias": "web-2"}).status_code == 202
    assert http.delete(f"/vms/{vm_uuid}", headers=V2).status_code == 202
    paused.run_jobs()
    assert get_vm(http, vm_uuid)["state"] == "destroyed"
    create_vm(http, alias="web-1")
    create_vm(http, alias="web-2")


def test_a_vm_created_before_alias_holds_keeps_its_alias(client, services) -> None:
    """A VM whose alias no hold records (appended as a version without holds did) is found
    through the VM read model when the alias's hold is first made, and holds it until it is
    destroyed."""
    old = Vm.create(vm_uuid=uuid.uuid4(), owner_uuid=vm_body()["owner_uuid"], brand="joyent",
                    ram=64, provision_job_uuid=str(uuid.uuid4()), cause=make_cause("old"),
                    alias="web-1")
    services.app.save(old)  # its own stream only
    assert wait_job(client, old.head_job["uuid"])["execution"] == "succeeded"
    assert services.projections.wait_for(services.commands.head_position(), ("vm_view",),
                                         timeout=10)
    _refused(client.post("/vms", json=vm_body(alias="web-1")), V1, "Invalid VM parameters")
    response = client.delete(f"/vms/{old.id}")
    assert response.status_code == 202, response.text
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"
    create_vm(client, alias="web-1")


def test_a_repeated_create_answers_as_the_first_though_its_alias_was_taken_since(
        client) -> None:
    """A retried CreateVm (same uuid, same body) of a VM whose provision failed answers that
    first create's outcome, as it did before alias holds: the alias its failed VM gave up,
    taken since by another VM, does not turn the retry into a duplicate alias."""
    body = vm_body(uuid=str(uuid.uuid4()), alias="web-1",
                   internal_metadata={"force_provision_failure": True})
    first = client.post("/vms", json=body)
    assert first.status_code == 202, first.text
    assert wait_job(client, first.json()["job_uuid"])["execution"] == "failed"
    create_vm(client, alias="web-1")
    again = client.post("/vms", json=body)
    assert again.status_code == 202, again.text
    assert again.json()["job_uuid"] == first.json()["job_uuid"]


def test_a_vm_its_agent_reports_keeps_its_alias_though_another_vm_has_it(client) -> None:
    """A fact is recorded, not refused: a VM the log did not have, found by its agent with an
    alias an active VM of its owner has, is recorded with it; the alias is then taken until
    both have given it up."""
    create_running_vm(client, alias="web-1")
    found = str(uuid.uuid4())
    response = client.put(f"/vms/{found}", json={
        "uuid": found, "alias": "web-1", "state": "running", "owner_uuid": OWNER})
    assert response.status_code == 200, response.text
    assert get_vm(client, found)["alias"] == "web-1"
    _refused(client.post("/vms", json=vm_body(alias="web-1")), V1, "Invalid VM parameters")


def test_by_default_duplicates_are_recorded_and_nothing_about_aliases_is_written(
        settings) -> None:
    """``VMLEDGER_UNIQUE_ALIASES`` is off by default: a create naming an alias an active VM of
    its owner has is recorded, and neither creates, an update's rename nor a destroy appends
    a hold event (the change loop reads and writes nothing about aliases)."""
    from fastapi.testclient import TestClient

    from service.api.app import create_app
    from service.container import Services

    default = Settings.model_fields["unique_aliases"].default
    assert default is False
    lax = Services.build(settings.model_copy(update={"unique_aliases": default}))
    try:
        with TestClient(create_app(services=lax, background=True)) as http:
            first = create_running_vm(http, alias="web-1")
            second = create_running_vm(http, alias="web-1")
            job = act_and_wait(http, second, "update", json={"alias": "web-2"})
            assert job["execution"] == "succeeded", job
            _destroy(http, first)
            create_vm(http, alias="web-2")
        assert _hold_events(lax) == []
    finally:
        lax.close()


def test_switched_on_a_hold_is_brought_up_to_date_with_what_was_done_while_it_was_off(
        client, services) -> None:
    """VMs that took an alias while the rule was off hold no hold, and one destroyed then
    still holds its old one: switched on, a create of the alias checks the hold's VMs and the
    ones the VM read model names against their own streams (service/commands/aliases.py)."""
    gone = create_running_vm(client, alias="web-1")  # on: holds web-1
    _destroy(client, create_running_vm(client, alias="web-2"))  # web-2's hold: empty
    services.commands.unique_aliases = False  # as VMLEDGER_UNIQUE_ALIASES=false does
    _destroy(client, gone)  # its hold not released
    kept = create_running_vm(client, alias="web-1")  # no hold taken
    create_running_vm(client, alias="web-2")  # no hold taken
    services.commands.unique_aliases = True
    assert services.projections.wait_for(services.commands.head_position(), ("vm_view",),
                                         timeout=10)
    assert services.commands.load_aggregate(AliasHold, hold_id(OWNER, "web-1")).holders == [
        gone]
    assert services.commands.load_aggregate(AliasHold, hold_id(OWNER, "web-2")).holders == []
    _refused(client.post("/vms", json=vm_body(alias="web-1")), V1, "Invalid VM parameters")
    _refused(client.post("/vms", json=vm_body(alias="web-2")), V1, "Invalid VM parameters")
    _destroy(client, kept)
    assert services.projections.wait_for(services.commands.head_position(), ("vm_view",),
                                         timeout=10)
    made = create_vm(client, alias="web-1")["vm_uuid"]  # gone's stale hold released
    assert services.commands.load_aggregate(AliasHold, hold_id(OWNER, "web-1")).holders == [
        made]
