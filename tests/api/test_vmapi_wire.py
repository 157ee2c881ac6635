"""What Triton's VMAPI client (sdc-clients 13.0.6, ``lib/vmapi.js``) sends and relies on, one
test per fix that tests/integration/test_vmapi_client.py found (api.md, "VMAPI client
compatibility"; docs/vmapi-compatibility.md)."""

from __future__ import annotations

import json

import pytest

from service.api.connection import KEEP_ALIVE_S
from tests.api.helpers import (
    OWNER, act, act_and_wait, assert_error, create_running_vm, create_vm, error_fields, get_vm,
    wait_job,
)


def test_create_vm_keeps_x_context_in_the_provision_jobs_params(client) -> None:
    # createVm({..., context}) sends the context as the x-context header, as every action does
    context = {"caller": {"type": "operator", "ip": "10.0.0.1"}, "params": {"alias": "web0"}}
    created = create_vm(client, headers={"x-context": json.dumps(context)})
    job = wait_job(client, created["job_uuid"])
    assert (job["name"], job["execution"]) == ("provision", "succeeded")
    assert job["params"]["context"] == context


def test_create_vm_without_x_context_has_no_context_in_its_job(client) -> None:
    job = wait_job(client, create_vm(client)["job_uuid"])
    assert "context" not in job["params"]


@pytest.mark.parametrize("action", ["start", "stop", "kill", "reboot", "update"])
def test_actions_accept_the_clients_origin_creator_uuid_and_timeout(client, action) -> None:
    # stopVm/rebootVm send ?timeout=; every action may send ?origin= and ?creator_uuid=
    vm_uuid = create_running_vm(client)
    change = {"alias": "renamed"} if action == "update" else None  # an update names a field
    response = act(client, vm_uuid, action, origin="cloudapi", creator_uuid=OWNER, timeout=30,
                   idempotent="true", json=change)
    assert response.status_code == 202, response.text
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"


def test_delete_vm_accepts_the_clients_origin_and_creator_uuid(client) -> None:
    vm_uuid = create_running_vm(client)
    response = client.delete(f"/vms/{vm_uuid}",
                             params={"origin": "cloudapi", "creator_uuid": OWNER})
    assert response.status_code == 202, response.text
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"


def test_the_clients_extra_parameters_are_still_validated(client) -> None:
    vm_uuid = create_running_vm(client)
    for params, field in (({"timeout": "soon"}, "timeout"), ({"timeout": "-1"}, "timeout"),
                          ({"creator_uuid": "nope"}, "creator_uuid"),
                          ({"origin": "x" * 257}, "origin")):
        response = act(client, vm_uuid, "stop", **params)
        assert error_fields(assert_error(response, 409, "ValidationFailed")) == {field: "Invalid"}


@pytest.mark.parametrize("signal", ["SIGKILL", "KILL", 9, "9"])
def test_kill_accepts_the_kill_signal_in_its_body(client, signal) -> None:
    # killVm({uuid, signal}) posts {"signal": ...}; SIGKILL is VMAPI's default, a forced stop
    vm_uuid = create_running_vm(client)
    job = act_and_wait(client, vm_uuid, "kill", json={"signal": signal})
    assert (job["name"], job["execution"]) == ("stop", "succeeded")
    assert get_vm(client, vm_uuid)["state"] == "stopped"


@pytest.mark.parametrize("signal", ["SIGTERM", "SIGHUP", 15, "", True])
def test_kill_refuses_a_signal_it_cannot_deliver(client, signal) -> None:
    # Only a forced stop is modelled: another signal would be silently turned into SIGKILL.
    vm_uuid = create_running_vm(client)
    response = act(client, vm_uuid, "kill", json={"signal": signal})
    assert error_fields(assert_error(response, 409, "ValidationFailed")) == {"signal": "Invalid"}


@pytest.mark.parametrize("action", ["start", "stop", "reboot"])
def test_signal_is_refused_outside_kill(client, action) -> None:
    vm_uuid = create_running_vm(client)
    response = act(client, vm_uuid, action, json={"signal": "SIGKILL"})
    assert error_fields(assert_error(response, 409, "ValidationFailed")) == {"signal": "Invalid"}
    response = act(client, vm_uuid, action, signal="SIGKILL")
    assert error_fields(assert_error(response, 409, "ValidationFailed")) == {"signal": "Invalid"}


@pytest.mark.parametrize("signal", ["SIGKILL", "KILL", "9", "sigkill"])
def test_kill_takes_the_signal_in_the_query_as_vmapi_does(client, signal) -> None:
    # VMAPI's restify maps query and body parameters alike (mapParams): found by a tester,
    # ?action=kill&signal=SIGKILL was refused as an unknown parameter
    vm_uuid = create_running_vm(client)
    job = act_and_wait(client, vm_uuid, "kill", signal=signal)
    assert (job["name"], job["execution"]) == ("stop", "succeeded")


def test_a_query_signal_is_checked_as_the_bodys_and_both_may_be_given(client) -> None:
    vm_uuid = create_running_vm(client)
    for params, body in (({"signal": "SIGTERM"}, None), ({"signal": "SIGTERM"},
                                                          {"signal": "SIGKILL"}),
                         ({"signal": "SIGKILL"}, {"signal": "SIGTERM"})):
        response = act(client, vm_uuid, "kill", json=body, **params)
        assert error_fields(assert_error(response, 409, "ValidationFailed")) == {
            "signal": "Invalid"}, (params, body)
    job = act_and_wait(client, vm_uuid, "kill", json={"signal": "KILL"}, signal="SIGKILL")
    assert job["execution"] == "succeeded"


def test_every_kept_alive_response_announces_how_long_an_idle_connection_is_kept(client) -> None:
    vm_uuid = create_running_vm(client)
    for response in (client.get("/ping"), client.get(f"/vms/{vm_uuid}"), client.head("/vms"),
                     act(client, vm_uuid, "stop"), client.get("/vms/nope")):
        assert response.headers["Connection"] == "keep-alive", response.headers
        assert response.headers["Keep-Alive"] == f"timeout={KEEP_ALIVE_S}", response.headers


def test_serve_keeps_idle_connections_well_past_the_clients_5_s_poll(monkeypatch,
                                                                        tmp_path) -> None:
    # The client's pooled keep-alive connection sits idle while its wait helper polls a job every
    # 5 s; with uvicorn's default 5 s idle timeout the next request raced the server's close and
    # failed with ECONNRESET ("socket hang up").
    from typer.testing import CliRunner

    from service.api import serving
    from service.cli.app import cli

    ran: dict[str, object] = {}
    monkeypatch.setattr(serving, "run", lambda *args, **kwargs: ran.update(kwargs))
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    result = CliRunner().invoke(cli, ["serve", "--port", "8089"])
    assert result.exit_code == 0, result.output
    assert ran["timeout_keep_alive"] == KEEP_ALIVE_S >= 60
