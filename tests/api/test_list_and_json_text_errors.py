"""The texts of two VMAPI input forms (docs/vmapi-compatibility.md): ``remove_nics``' ``macs``
and a metadata field given as JSON text. ``macs``' own bounds (1 to 32 MACs, none empty, of
at most 17 characters) are told in the words of its other errors, naming ``macs`` alone
(pydantic's "List should have at least 1 item after validation" and ``macs.1`` "String should
have at least 1 character" came through: a tester). A metadata text is refused as VMAPI's
``JSON.parse`` refuses it (``Malformed JSON``, ``NaN`` and ``Infinity`` included, which
Python's parser reads), and a key it gives twice as the same object given as an object is:
``Invalid Parameters``, naming ``tags.KEY``, ``may be given only once``."""

from __future__ import annotations

import json

import pytest

from tests.api.helpers import act, assert_error, create_running_vm, vm_body

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
INVALID_MACS = "Invalid MAC addresses object"


def _refused(response, message: str, errors: list[dict[str, str]]) -> None:
    body = assert_error(response, 409, "ValidationFailed")
    assert (body["message"], body["errors"]) == (message, errors), body


def _macs(message: str) -> list[dict[str, str]]:
    return [{"field": "macs", "code": "Invalid", "message": message}]


def test_macs_bounds_are_told_in_macs_words_naming_macs(client) -> None:
    vm_uuid = create_running_vm(client)
    count = f"{INVALID_MACS}: at least 1 and at most 32 MAC addresses"
    empty = f"{INVALID_MACS}: an empty MAC address"
    long = f"{INVALID_MACS}: a MAC address of more than 17 characters"
    for body, message in (({"macs": []}, count), ({"macs": ["90:b8:d0:1f:2e:3d"] * 33}, count),
                          ({"macs": ["90:b8:d0:1f:2e:3d", ""]}, empty),
                          ({"macs": "90:b8:d0:1f:2e:3d,,"}, empty), ({"macs": ","}, empty),
                          ({"macs": ["90:b8:d0:1f:2e:3d:00"]}, long)):
        _refused(act(client, vm_uuid, "remove_nics", json=body),
                 "Invalid VM update parameters", _macs(message))
    for query, message in (("M,,", empty), (",", empty), (",".join(["M"] * 33), count)):
        _refused(act(client, vm_uuid, "remove_nics", macs=query),
                 "Invalid VM update parameters", _macs(message))
    # VMAPI's own texts are unchanged
    _refused(act(client, vm_uuid, "remove_nics", json={"macs": [1]}),
             "Invalid VM update parameters", _macs(INVALID_MACS))


def _posted(client, path: str, body: str, **params: str):
    return client.post(path, params=params, content=body,
                       headers={"content-type": "application/json"})


@pytest.mark.parametrize("field", ["tags", "customer_metadata", "internal_metadata"])
def test_a_key_a_metadata_text_gives_twice_is_refused_as_the_objects_is(client, field) -> None:
    vm_uuid = create_running_vm(client)
    repeated = [{"field": f"{field}.a", "code": "Invalid", "message": "may be given only once"}]
    for path, params, base in ((f"/vms/{vm_uuid}", {"action": "update"}, {}),
                               ("/vms", {}, vm_body())):
        as_object = json.dumps(base)[:-1].lstrip("{")
        as_object = (as_object + ", " if as_object else "") + f'"{field}": {{"a": 1, "a": 2}}'
        _refused(_posted(client, path, "{" + as_object + "}", **params),
                 "Invalid Parameters", repeated)
        as_text = json.dumps({**base, field: '{"a": 1, "a": 2}'})
        _refused(_posted(client, path, as_text, **params), "Invalid Parameters", repeated)


@pytest.mark.parametrize("text", ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}',
                                  '{"a": 1,}', "{'a': 1}", '{"a": 1} x'])
def test_a_metadata_text_json_parse_refuses_is_malformed_json(client, text) -> None:
    vm_uuid = create_running_vm(client)
    malformed = [{"field": "tags", "code": "Invalid", "message": "Malformed JSON"}]
    _refused(act(client, vm_uuid, "update", json={"tags": text}),
             "Invalid VM update parameters", malformed)
    _refused(client.post("/vms", json=vm_body(tags=text)), "Invalid VM parameters", malformed)


def test_a_metadata_text_json_parse_takes_is_taken(client) -> None:
    vm_uuid = create_running_vm(client)
    response = act(client, vm_uuid, "update", json={"tags": '{"a": 1e2, "b": "x"}'})
    assert response.status_code == 202, response.text
