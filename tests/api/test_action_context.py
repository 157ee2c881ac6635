"""An action's context (docs/api.md, "Contract: headers we store"): the ``x-context`` header or
the body's ``context`` is kept in the job's ``params.context``, for every action that queues a
job, each checked wherever it is given, the two refused when they differ."""

from __future__ import annotations

import json

from tests.api.helpers import (
    V2, act, act_and_wait, assert_error, create_running_vm, create_vm, error_fields, get_vm,
    history_types,
)
from tests.api.test_networks import make_network


def test_x_context_is_kept_in_the_jobs_params(client) -> None:
    vm_uuid = create_running_vm(client)
    context = {"caller": {"type": "signature", "ip": "10.0.0.1"}, "params": {"a": 1}}
    job = act_and_wait(client, vm_uuid, "stop", headers={"x-context": json.dumps(context)})
    assert job["params"]["context"] == context
    in_body = act_and_wait(client, vm_uuid, "start", json={"context": {"from": "body"}})
    assert in_body["params"]["context"] == {"from": "body"}


def test_the_nic_actions_keep_their_context_in_the_jobs_params_and_check_it(client) -> None:
    """A reviewer's finding: ``x-context`` was said to be kept in the job's params, but
    ``add_nics`` and ``remove_nics`` never read it (nor a body's ``context``), so a header
    over the limit was accepted there and the context lost. They keep it as every action
    that queues a job does; quarantine and release queue none and do not read it."""
    network = make_network(client)
    vm_uuid = create_running_vm(client)
    added = act_and_wait(client, vm_uuid, "add_nics", headers={**V2, "x-context": '{"who": 1}'},
                         json={"networks": [network["uuid"]]})
    assert added["execution"] == "succeeded" and added["params"]["context"] == {"who": 1}
    [nic] = get_vm(client, vm_uuid)["nics"]
    removed = act_and_wait(client, vm_uuid, "remove_nics", headers=V2,
                           json={"macs": [nic["mac"]], "context": {"from": "body"}})
    assert removed["params"]["context"] == {"from": "body"}
    before = history_types(client, vm_uuid)
    too_long = act(client, vm_uuid, "add_nics", json={"networks": [network["uuid"]]},
                   headers={**V2, "x-context": json.dumps({"a": "x" * 5000})})
    assert error_fields(assert_error(too_long, 422, "ValidationFailed")) == {
        "x-context": "Invalid"}
    differ = act(client, vm_uuid, "add_nics", headers={**V2, "x-context": '{"k": 2}'},
                 json={"networks": [network["uuid"]], "context": {"k": 1}})
    assert error_fields(assert_error(differ, 422, "ConflictingParameters")) == {
        "x-context": "Invalid"}
    assert history_types(client, vm_uuid) == before


def test_an_x_context_beside_a_body_context_is_still_checked_and_must_agree(client) -> None:
    """Found by a tester: with a body ``context`` the header was not read at all, so a header
    the service refuses on its own (too long, repeated keys) passed, silently dropped."""
    vm_uuid = create_running_vm(client)
    too_long = json.dumps({"a": "x" * 5000})
    for header in (too_long, '{"a": 1, "a": 2}', json.dumps({"other": 1})):
        for method in ("start", "delete"):
            before = history_types(client, vm_uuid)
            headers, body = {"x-context": header}, {"context": {"k": 1}}
            response = (client.request("DELETE", f"/vms/{vm_uuid}", headers=headers, json=body)
                        if method == "delete" else act(client, vm_uuid, "start", json=body,
                                                         headers=headers))
            answer = assert_error(response, 409, "ValidationFailed" if header != json.dumps(
                {"other": 1}) else "ConflictingParameters")
            assert error_fields(answer) == {"x-context": "Invalid"}, answer
            assert history_types(client, vm_uuid) == before
    same = act_and_wait(client, vm_uuid, "stop", json={"context": {"k": 1}},
                        headers={"x-context": '{"k": 1}'})
    assert same["params"]["context"] == {"k": 1}


def test_a_repeated_action_with_another_context_queues_its_own_job(paused, services) -> None:
    """Found by a tester: a second stop with another ``x-context`` merged into the first's
    queued job, so its answer named A's job, the job's ``params.context`` stayed A's, and
    nothing of B's request was recorded. A repeat merges only when it would record the very
    same params (``Vm.matching_active_job``); a repeat with the same context still merges."""
    http = paused.http
    vm_uuid = create_vm(http)["vm_uuid"]
    paused.run_jobs()
    assert get_vm(http, vm_uuid)["state"] == "running"
    by_a = act(http, vm_uuid, "stop", headers={"x-context": '{"who": "A"}'})
    head = services.commands.head_position()
    again_a = act(http, vm_uuid, "stop", headers={"x-context": '{"who": "A"}'})
    assert again_a.json()["job_uuid"] == by_a.json()["job_uuid"]
    assert services.commands.head_position() == head  # a true repeat appends nothing
    by_b = act(http, vm_uuid, "stop", headers={"x-context": '{"who": "B"}'})
    no_context = act(http, vm_uuid, "stop")
    uuids = [r.json()["job_uuid"] for r in (by_a, by_b, no_context)]
    assert len(set(uuids)) == 3, uuids
    assert get_vm(http, vm_uuid)["queued_job_uuids"] == uuids
    contexts = [services.commands.load(vm_uuid).active_job(u)["params"].get("context")
                       for u in uuids]
    assert contexts == [{"who": "A"}, {"who": "B"}, None]


def test_a_body_context_is_bounded_as_the_header_is_and_a_refusal_appends_nothing(client):
    """Found by a tester: a body's ``context`` of 900 KB was stored in the job's params (a
    ``JobQueued`` event of 900 KB, repeated by every page of ``GET /jobs``), while the same
    value as ``x-context`` was refused over 4,096 bytes."""
    network = make_network(client)
    vm_uuid = create_running_vm(client)
    big = {"a": "x" * 5000}
    before = history_types(client, vm_uuid)
    for action, body in (("stop", {}), ("update", {"alias": "ok3"}),
                         ("add_nics", {"networks": [network["uuid"]]})):
        refused = act(client, vm_uuid, action, json={**body, "context": big})
        assert error_fields(assert_error(refused, 409, "ValidationFailed")) == {
            "context": "Invalid"}, action
    deleted = client.request("DELETE", f"/vms/{vm_uuid}", json={"context": big})
    assert error_fields(assert_error(deleted, 409, "ValidationFailed")) == {"context": "Invalid"}
    assert history_types(client, vm_uuid) == before
    just = act_and_wait(client, vm_uuid, "stop", json={"context": {"a": "x" * 4000}})
    assert just["params"]["context"] == {"a": "x" * 4000}
