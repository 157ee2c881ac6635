"""CreateVm's ``ram`` and ``cpu_cap`` are read as VMAPI's createVm reads them
(``createValidateNumberFn``: a number or its decimal text, answered "Not a valid number: …"),
and an action's ``timeout`` in the body as in the query (VMAPI passes it on unread): found by
a tester, ``"ram": "1024"`` was refused and bad values answered pydantic's texts."""

from __future__ import annotations

import pytest

from tests.api.helpers import (
    act,
    assert_error,
    create_running_vm,
    create_vm,
    get_vm,
    vm_body,
    wait_job,
)

# Input refused (or read) before anything is stored: the backend adds nothing to what these
# check, so they run on SQLite alone (the default run's time: docs/operations.md)
pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

RAM_REFUSAL = "Not a valid number: number must be >= 1"
CPU_CAP_REFUSAL = "Not a valid number: number must be >= 0"


def errors_of(response) -> dict[str, str]:
    body = assert_error(response, 409, "ValidationFailed")
    return {item["field"]: item["message"] for item in body["errors"]}


@pytest.mark.parametrize("ram, cpu_cap", [("1024", "200"), (1024.0, 200.0), (1024, "0")])
def test_ram_and_cpu_cap_take_a_number_or_its_decimal_text(client, ram, cpu_cap):
    created = create_vm(client, ram=ram, cpu_cap=cpu_cap)
    assert wait_job(client, created["job_uuid"])["execution"] == "succeeded"
    vm = get_vm(client, created["vm_uuid"])
    assert (vm["ram"], vm["cpu_cap"]) == (1024, int(float(cpu_cap)))


@pytest.mark.parametrize("ram", [0, -5, "0", "abc", "", True, None, [5], {"a": 1}, 1.5,
                                 "12abc", " 12", "1e3", "+12", "-1"])
def test_a_bad_ram_answers_vmapis_text(client, services, ram):
    head = services.commands.head_position()
    assert errors_of(client.post("/vms", json=vm_body(ram=ram))) == {"ram": RAM_REFUSAL}
    assert services.commands.head_position() == head


@pytest.mark.parametrize("ram", [4194305, "4194305", "9" * 30])
def test_a_ram_above_vmledgers_limit_names_the_limit(client, ram):
    assert errors_of(client.post("/vms", json=vm_body(ram=ram))) == {
        "ram": "Not a valid number: number must be >= 1 and <= 4194304"}


@pytest.mark.parametrize("cpu_cap, message", [
    (-1, CPU_CAP_REFUSAL), ("x", CPU_CAP_REFUSAL), (False, CPU_CAP_REFUSAL),
    (100_001, "Not a valid number: number must be >= 0 and <= 100000")])
def test_a_bad_cpu_cap_answers_vmapis_text(client, cpu_cap, message):
    assert errors_of(client.post("/vms", json=vm_body(cpu_cap=cpu_cap))) == {
        "cpu_cap": message}


def test_bad_numbers_are_reported_with_every_other_problem(client):
    body = {"owner_uuid": "nope", "brand": "bsd", "ram": "x", "cpu_cap": -1}
    assert errors_of(client.post("/vms", json=body)) == {
        "owner_uuid": "Invalid UUID", "brand": "Must be one of: bhyve, joyent, joyent-minimal, "
                                               "kvm, lx",
        "ram": RAM_REFUSAL, "cpu_cap": CPU_CAP_REFUSAL}


@pytest.mark.parametrize("action", ["stop", "reboot"])
def test_an_action_timeout_in_the_body_takes_its_decimal_text_as_the_query_does(
        client, action):
    vm_uuid = create_running_vm(client)
    response = act(client, vm_uuid, action, json={"timeout": "30"})
    assert response.status_code == 202, response.text
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"
    # the same value in the query and the body, in either form, is one request
    response = act(client, vm_uuid, "start" if action == "stop" else action,
                   json={"timeout": 30}, timeout="30")
    assert response.status_code == 202, response.text


@pytest.mark.parametrize("timeout, message", [
    ("x", "must be an integer"), (True, "must be an integer"), (1.5, "must be an integer"),
    (-1, "must be 0 to 9007199254740991"), ("-1", "must be 0 to 9007199254740991"),
    (2**53, "must be 0 to 9007199254740991")])
def test_a_bad_action_timeout_in_the_body_answers_the_querys_text(client, timeout, message):
    vm_uuid = create_running_vm(client)
    assert errors_of(act(client, vm_uuid, "stop", json={"timeout": timeout})) == {
        "timeout": message}
