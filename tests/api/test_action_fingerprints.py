"""An ``Idempotency-Key``'s fingerprint of a VM action (service/api/action_params.py
``asked_params``, service/api/fingerprints.py). Found by a reviewer: the body's
``true`` was hashed as ``"true"`` and the query's ``1`` as written, so ``?idempotent=1`` and
``{"idempotent": true}`` were two requests; and a key stored before body parameters counted as
the query's named another request after the upgrade, so a retry of the same bytes (keys live
24 h) was 422 ``IdempotencyKeyReused`` where it gets the stored answer."""

from __future__ import annotations

import pytest

from service.api import deps, fingerprints
from tests.api.helpers import OWNER, assert_error


def hashed_as_sent(patch: pytest.MonkeyPatch) -> None:
    """Fingerprint as the service did before it hashed the validated body: the body as sent
    (``fingerprints``' ``parsed`` unused)."""
    hashed = fingerprints.fingerprints
    patch.setattr(deps, "fingerprints",
                  lambda *args, parsed=None, kept_null=(), **named: hashed(*args, **named))


def _post(http, vm_uuid: str, body, key: str, **params):
    return http.post(f"/vms/{vm_uuid}", params=params, json=body,
                     headers={"Idempotency-Key": key})


@pytest.fixture
def vm(paused):
    created = paused.http.post("/vms", json={"owner_uuid": OWNER, "brand": "joyent",
                                             "ram": 256})
    paused.run_jobs()
    return created.json()["vm_uuid"]


def test_a_parameter_is_one_value_in_the_query_or_the_body(paused, services, vm) -> None:
    http = paused.http
    first = _post(http, vm, {"action": "stop", "idempotent": True, "timeout": 5}, "one-form")
    assert first.status_code == 202, first.text
    head = services.commands.head_position()
    for params, body in (({"idempotent": "1", "timeout": "5"}, None),
                         ({"idempotent": "TRUE"}, {"timeout": 5}),
                         ({"timeout": "5"}, {"idempotent": True}),
                         ({}, {"idempotent": True, "timeout": 5})):
        again = _post(http, vm, body, "one-form", action="stop", **params)
        assert (again.status_code, again.json()) == (202, first.json()), (params, body)
    for params, body in (({"idempotent": "0", "timeout": "5"}, None),
                         ({"timeout": "6"}, {"idempotent": True})):
        assert_error(_post(http, vm, body, "one-form", action="stop", **params),
                     422, "IdempotencyKeyReused")
    assert services.commands.head_position() == head


@pytest.mark.parametrize("params, body", [
    ({}, {"action": "stop", "owner_uuid": OWNER, "idempotent": True}),
    ({"action": "stop", "idempotent": "1"}, None),
    ({"action": "stop"}, {"sync": False, "timeout": 5}),
])
def test_a_key_stored_before_the_upgrade_still_names_its_request(
        paused, services, vm, monkeypatch, params, body) -> None:
    http = paused.http
    # the fingerprint before body parameters counted as the query's: the raw query, the
    # whole body
    with monkeypatch.context() as before:
        hashed_as_sent(before)
        before.setattr(fingerprints, "asked_params",
                       lambda request, data, **_: (list(request.query_params.multi_items()),
                                                   data))
        first = _post(http, vm, body, "upgraded", **params)
    assert first.status_code == 202, first.text
    head = services.commands.head_position()
    again = _post(http, vm, body, "upgraded", **params)
    assert (again.status_code, again.json()) == (202, first.json())
    assert_error(_post(http, vm, None, "upgraded", action="reboot"), 422,
                 "IdempotencyKeyReused")
    assert services.commands.head_position() == head


# A parameter given the value that leaving it out means is the request without it (a tester:
# ``?action=stop`` then ``?action=stop&sync=false`` with one key was 422 IdempotencyKeyReused)
LEFT_OUT = [({"sync": "false"}, None), ({"sync": "0"}, None), ({"idempotent": "FALSE"}, None),
            ({}, {"sync": False}), ({}, {"idempotent": False, "context": None}),
            ({}, {"timeout": None, "origin": None, "owner_uuid": None}), ({}, {})]


def test_a_parameter_given_its_default_is_the_request_that_leaves_it_out(
        paused, services, vm) -> None:
    http = paused.http
    first = _post(http, vm, None, "defaults", action="stop")
    assert first.status_code == 202, first.text
    head = services.commands.head_position()
    for params, body in LEFT_OUT:
        again = _post(http, vm, body, "defaults", action="stop", **params)
        assert (again.status_code, again.json()) == (202, first.json()), (params, body)
    for params, body in (({"sync": "true"}, None), ({}, {"idempotent": True})):
        assert_error(_post(http, vm, body, "defaults", action="stop", **params),
                     422, "IdempotencyKeyReused")
    assert services.commands.head_position() == head


def test_a_delete_with_its_defaults_given_is_the_delete_without_them(
        paused, services, vm) -> None:
    http = paused.http
    first = http.delete(f"/vms/{vm}", headers={"Idempotency-Key": "delete"})
    assert first.status_code == 202, first.text
    for params, body in (({"sync": "0"}, None), ({}, {"sync": False, "context": None})):
        again = http.request("DELETE", f"/vms/{vm}", params=params, json=body,
                             headers={"Idempotency-Key": "delete"})
        assert (again.status_code, again.json()) == (202, first.json()), (params, body)


def test_a_create_with_its_defaults_given_is_the_create_without_them(paused, services) -> None:
    http, body = paused.http, {"owner_uuid": OWNER, "brand": "joyent", "ram": 256}
    first = http.post("/vms", json=body, headers={"Idempotency-Key": "create"})
    assert first.status_code == 202, first.text
    head = services.commands.head_position()
    for params, given in (
            ({"sync": "false"}, {}),
            ({}, {"persistence": "persistent", "volumes": [], "alias": None, "tags": None,
                  "uuid": None, "image_uuid": None, "networks": None})):
        again = http.post("/vms", params=params, json={**body, **given},
                          headers={"Idempotency-Key": "create"})
        assert (again.status_code, again.json()) == (202, first.json()), (params, given)
    assert_error(http.post("/vms", json={**body, "persistence": "ephemeral"},
                           headers={"Idempotency-Key": "create"}), 422, "IdempotencyKeyReused")
    assert services.commands.head_position() == head


def test_a_volume_network_or_server_given_its_defaults_is_the_one_without_them(
        paused, services) -> None:
    http = paused.http
    for path, body, given in (
            ("/volumes", {"name": "data"}, {"networks": {}, "uuid": None}),
            ("/networks", {"name": "lan", "subnet": "10.9.0.0/24",
                           "provision_start_ip": "10.9.0.10",
                           "provision_end_ip": "10.9.0.20"}, {"gateway": None})):
        first = http.post(path, json=body, headers={"Idempotency-Key": path})
        assert first.status_code == 201, first.text
        again = http.post(path, json={**body, **given}, headers={"Idempotency-Key": path})
        assert again.status_code == 201, (path, again.text)
        assert again.json()["uuid"] == first.json()["uuid"]
    server = f"/servers/{services.fleet.servers()[0].uuid}"
    first = http.post(server, params={"action": "reboot"}, headers={"Idempotency-Key": "boot"})
    assert first.status_code == 202, first.text
    for body in ({}, {"boot_id": None}):
        again = http.post(server, params={"action": "reboot"}, json=body,
                          headers={"Idempotency-Key": "boot"})
        assert (again.status_code, again.json()) == (202, first.json()), body


def test_a_key_stored_before_defaults_were_left_out_still_names_its_request(
        paused, services, vm, monkeypatch) -> None:
    http, asked = paused.http, fingerprints.asked_params
    with monkeypatch.context() as before:  # an action's fingerprint before: defaults kept
        hashed_as_sent(before)
        before.setattr(fingerprints, "asked_params",
                       lambda request, data, **_: asked(request, data, defaults_dropped=False))
        first = _post(http, vm, {"sync": False}, "kept", action="stop", idempotent="0")
    assert first.status_code == 202, first.text
    again = _post(http, vm, {"sync": False}, "kept", action="stop", idempotent="0")
    assert (again.status_code, again.json()) == (202, first.json())
    body = {"owner_uuid": OWNER, "brand": "joyent", "ram": 256, "persistence": "persistent"}
    with monkeypatch.context() as before:  # a create's before: mapped, defaults kept
        hashed_as_sent(before)
        before.setattr(fingerprints, "asked_params",
                       lambda request, data, **_: asked(request, data, defaults_dropped=False))
        before.setattr(fingerprints, "_without_defaults", lambda data, _model: data)
        created = http.post("/vms", params={"sync": "0"}, json=body,
                            headers={"Idempotency-Key": "kept-create"})
    assert created.status_code == 202, created.text
    again = http.post("/vms", params={"sync": "0"}, json=body,
                      headers={"Idempotency-Key": "kept-create"})
    assert (again.status_code, again.json()) == (202, created.json())
