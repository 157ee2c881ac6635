"""An ``Idempotency-Key``'s fingerprint hashes the body as its route validated it
(service/api/fingerprints.py ``_meant_body``). Found by a tester: after a CreateVm under a
key, the same create sent again with ``"tags": {}``, ``"customer_metadata": {}``,
``"internal_metadata": {}``, ``"persistence": {"preset": "persistent"}`` or ``"ram": "128"``
was ``422 IdempotencyKeyReused``, though each creates the very VM the first did: the raw
JSON was compared with the model's default, not what the request means."""

from __future__ import annotations

import pytest

from tests.api.helpers import OWNER, assert_error
from tests.api.test_action_fingerprints import hashed_as_sent

BODY = {"owner_uuid": OWNER, "brand": "bhyve", "ram": 128}

# Each means what BODY means: the first kind already replayed, the second was refused
SAME = [{"sync": False}, {"persistence": "persistent"}, {"volumes": []}, {"tags": None},
        {"alias": None},
        {"tags": {}}, {"customer_metadata": {}}, {"internal_metadata": {}},
        {"persistence": {"preset": "persistent"}}, {"persistence": {}}, {"ram": "128"},
        {"customer_metadata": "{}"}, {"ram": "128", "tags": {}, "customer_metadata": None}]
# Each asks for another VM
OTHER = [{"tags": {"role": "db"}}, {"ram": 256}, {"ram": "256"}, {"alias": "web0"},
         {"customer_metadata": {"a": "b"}}, {"internal_metadata": {"a": "b"}},
         {"persistence": "ephemeral"}, {"persistence": {"guest_crash": "destroy"}},
         {"persistence": {"preset": "ephemeral"}}, {"brand": "kvm"}]


def _create(http, body, key: str, **params):
    return http.post("/vms", params=params, json=body, headers={"Idempotency-Key": key})


def test_a_create_meaning_the_same_is_the_same_request(paused, services) -> None:
    http = paused.http
    first = _create(http, BODY, "same")
    assert first.status_code == 202, first.text
    head = services.commands.head_position()
    for given in SAME:
        again = _create(http, {**BODY, **given}, "same")
        assert (again.status_code, again.json()) == (202, first.json()), given
    again = _create(http, BODY, "same", sync="0")
    assert (again.status_code, again.json()) == (202, first.json())
    for given in OTHER:
        assert_error(_create(http, {**BODY, **given}, "same"), 422, "IdempotencyKeyReused")
    assert services.commands.head_position() == head


def test_metadata_as_json_text_is_its_object(paused, services) -> None:
    http, metadata = paused.http, {"user-script": "echo hi", "size": 3}
    first = _create(http, {**BODY, "customer_metadata": metadata}, "text")
    assert first.status_code == 202, first.text
    again = _create(http, {**BODY, "customer_metadata": '{"size": 3, "user-script": "echo hi"}'},
                    "text")
    assert (again.status_code, again.json()) == (202, first.json())
    assert_error(_create(http, {**BODY, "customer_metadata": '{"size": 4}'}, "text"), 422,
                 "IdempotencyKeyReused")


@pytest.fixture
def vm(paused):
    created = paused.http.post("/vms", json=BODY)
    paused.run_jobs()
    return created.json()["vm_uuid"]


def _update(http, vm_uuid: str, body, key: str):
    return http.post(f"/vms/{vm_uuid}", params={"action": "update"}, json=body,
                     headers={"Idempotency-Key": key})


def test_an_updates_null_clears_and_is_not_its_absence(paused, services, vm) -> None:
    http = paused.http
    first = _update(http, vm, {"tags": {"role": "db"}}, "update")
    assert first.status_code == 202, first.text
    head = services.commands.head_position()
    for same in ({"tags": '{"role": "db"}'}, {"tags": {"role": "db"}, "sync": False},
                 {"tags": {"role": "db"}, "context": None}):
        again = _update(http, vm, same, "update")
        assert (again.status_code, again.json()) == (202, first.json()), same
    for other in ({"tags": {"role": "db"}, "alias": None},
                  {"tags": {"role": "db"}, "customer_metadata": None},
                  {"tags": {"role": "db"}, "customer_metadata": {}}, {"tags": None}, {}):
        assert_error(_update(http, vm, other, "update"), 422, "IdempotencyKeyReused")
    assert services.commands.head_position() == head
    cleared = _update(http, vm, {"alias": None}, "clear")
    assert cleared.status_code == 202, cleared.text
    assert_error(_update(http, vm, {}, "clear"), 422, "IdempotencyKeyReused")


def test_a_key_stored_as_sent_still_names_its_request(paused, services, monkeypatch) -> None:
    http, body = paused.http, {**BODY, "tags": {}, "ram": "128"}
    with monkeypatch.context() as before:
        hashed_as_sent(before)
        first = _create(http, body, "as-sent")
    assert first.status_code == 202, first.text
    again = _create(http, body, "as-sent")
    assert (again.status_code, again.json()) == (202, first.json())
    assert_error(_create(http, {**BODY, "ram": 256}, "as-sent"), 422, "IdempotencyKeyReused")


def test_a_volume_given_its_values_in_another_spelling_is_one_request(paused) -> None:
    http, network = paused.http, "5b1f7b2e-6a8c-4d5e-9f00-111111111111"
    first = http.post("/volumes", json={"name": "data", "networks": {}},
                      headers={"Idempotency-Key": "volume"})
    assert first.status_code == 201, first.text
    again = http.post("/volumes", json={"name": "data"}, headers={"Idempotency-Key": "volume"})
    assert (again.status_code, again.json()["uuid"]) == (201, first.json()["uuid"])
    assert_error(http.post("/volumes", json={"name": "data", "networks": {network: "10.0.0.5"}},
                           headers={"Idempotency-Key": "volume"}), 422, "IdempotencyKeyReused")
