"""An ``Idempotency-Key``'s fingerprint of a VM action (service/api/action_params.py
``asked_params``, service/api/deps.py ``idempotency_of``). Found by a reviewer: the body's
``true`` was hashed as ``"true"`` and the query's ``1`` as written, so ``?idempotent=1`` and
``{"idempotent": true}`` were two requests; and a key stored before body parameters counted as
the query's named another request after the upgrade, so a retry of the same bytes (keys live
24 h) was 422 ``IdempotencyKeyReused`` where it gets the stored answer."""

from __future__ import annotations

import pytest

from service.api import deps
from tests.api.helpers import OWNER, assert_error


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
        before.setattr(deps, "asked_params",
                       lambda request, data: (list(request.query_params.multi_items()), data))
        first = _post(http, vm, body, "upgraded", **params)
    assert first.status_code == 202, first.text
    head = services.commands.head_position()
    again = _post(http, vm, body, "upgraded", **params)
    assert (again.status_code, again.json()) == (202, first.json())
    assert_error(_post(http, vm, None, "upgraded", action="reboot"), 422,
                 "IdempotencyKeyReused")
    assert services.commands.head_position() == head
