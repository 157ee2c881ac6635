"""Numbers a client sends are read as JavaScript reads them (VMAPI parses every body with
``JSON.parse``): a number written as a float holding a whole value within JavaScript's safe
integers (``1.0``, ``1E5``, ``-0.0``) is that integer, so it is stored, shown and matched as
VMAPI would (``1``, ``100000``, ``0``), not in Python's float form (``1.0``, ``100000.0``).
Found by a tester: ``"tags": {"a": 1.0}`` showed ``1.0``, and ``tag.a=1`` matched nothing.
domain/json_input.py reads them so, at the parse of every body."""

from __future__ import annotations

import json

import pytest

from domain import json_input
from tests.api.helpers import OWNER, act_and_wait, get_vm, wait_job

# 2**53 is past JavaScript's safe integers: its double is no longer one integer's alone
RAW = '{"a": 1.0, "b": 1E5, "c": 1.5, "d": -0.0, "e": 2.5e1, "f": 9007199254740992.0}'
READ = {"a": 1, "b": 100000, "c": 1.5, "d": 0, "e": 25, "f": 9007199254740992.0}


def _typed(value: dict) -> list[tuple[str, object, type]]:
    return [(key, item, type(item)) for key, item in value.items()]


@pytest.mark.parametrize("text", [RAW, json.dumps(RAW)], ids=["object", "json text"])
def test_whole_floats_in_a_vms_tags_and_metadata_are_stored_and_shown_as_integers(
        client, text) -> None:
    fields = ("tags", "customer_metadata", "internal_metadata")
    given = ", ".join(f'"{field}": {text}' for field in fields)
    body = f'{{"owner_uuid": "{OWNER}", "brand": "joyent", "ram": 256, {given}}}'
    response = client.post("/vms", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 202, response.text
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"
    vm_uuid = response.json()["vm_uuid"]
    vm = get_vm(client, vm_uuid)
    for field in fields:
        assert _typed(vm[field]) == _typed(READ), field
    shown = client.get(f"/vms/{vm_uuid}").text
    assert '"a":1,"b":100000,"c":1.5,"d":0,"e":25' in shown.replace(" ", "")
    for params in ({"tag.a": "1"}, {"tag.b": "100000"}, {"internal_metadata.e": "25"}):
        listed = client.get("/vms", params=params)
        assert [v["uuid"] for v in listed.json()] == [vm_uuid], params


def test_an_update_and_an_actions_context_read_them_so_too(client) -> None:
    created = client.post("/vms", json={"owner_uuid": OWNER, "brand": "joyent", "ram": 256})
    vm_uuid = created.json()["vm_uuid"]
    wait_job(client, created.json()["job_uuid"])
    body = '{"tags": {"n": 3.0}, "context": {"attempt": 2.0}}'
    response = client.post(f"/vms/{vm_uuid}", params={"action": "update"}, content=body,
                           headers={"content-type": "application/json"})
    assert response.status_code == 202, response.text
    job = wait_job(client, response.json()["job_uuid"])
    assert _typed(get_vm(client, vm_uuid)["tags"]) == [("n", 3, int)]
    assert _typed(job["params"]["context"]) == [("attempt", 2, int)]
    assert act_and_wait(client, vm_uuid, "stop", headers={"x-context": '{"try": 1E1}'}
                        )["params"]["context"] == {"try": 10}


@pytest.mark.parametrize("parse", [json_input.loads_body, json_input.loads,
                                   lambda text: json_input.loads(text, constants=False)])
def test_every_parse_of_client_json_reads_numbers_as_javascript(parse) -> None:
    value = parse(RAW.encode() if parse is json_input.loads_body else RAW)
    assert _typed(value) == _typed(READ)
    assert parse(b"[1e400]" if parse is json_input.loads_body else "[1e400]") == [float("inf")]
