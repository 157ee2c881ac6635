"""ListVms validated as VMAPI validates it, its error bodies word for word (service/api/
list_vms_params.py; the cases of sdc-vmapi's vms.list, vms.list-sort, vms.marker and
vms.list-filter-internal-metadata tests, so a regression shows without Node.js)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.api.helpers import create_running_vm, create_vm

VALID_UUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"

# For the cases refused while the query string is parsed (list_vms_params), before any read:
# nothing of the backend is in their way, so they run on one.
ONE_BACKEND = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def refused(client, params, *errors: dict) -> None:
    response = client.get("/vms", params=params)
    assert response.status_code == 409, (params, response.text)
    assert response.json() == {"code": "ValidationFailed", "message": "Invalid Parameters",
                               "errors": list(errors)}, params


def invalid(field: str, message: str = "Invalid parameter") -> dict:
    return {"field": field, "code": "Invalid", "message": message}


def test_unknown_and_malformed_uuid_parameters(client) -> None:
    refused(client, {"foo": "bar"}, invalid("foo"))
    for name in ("uuid", "owner_uuid", "server_uuid", "image_uuid"):
        refused(client, {name: "invalid_uuid"}, invalid(name, "Invalid UUID"))
        assert client.get("/vms", params={name: VALID_UUID}).status_code == 200


@pytest.mark.parametrize(("params", "message"), [
    ({"brand": "foobar"}, "Must be one of: bhyve, joyent, joyent-minimal, kvm, lx"),
    ({"state": "foobar"}, "Must be one of: active, destroyed, running, stopped"),
    ({"docker": "foobar"}, "Invalid parameter"),
    ({"alias": ""}, r"String does not match regexp: /^[a-zA-Z0-9][a-zA-Z0-9\_\.\-]*$/"),
    ({"alias": ","}, r"String does not match regexp: /^[a-zA-Z0-9][a-zA-Z0-9\_\.\-]*$/"),
    ({"ram": "128.5"}, "String does not match regexp: /^0$|^([1-9][0-9]*$)/"),
    ({"ram": "abc"}, "String does not match regexp: /^0$|^([1-9][0-9]*$)/"),
    ({"uuids": ""}, "Invalid values: "),
    ({"uuids": f"{VALID_UUID},invalid_uuid"}, f"Invalid values: {VALID_UUID},invalid_uuid"),
    ({"create_timestamp": "foo"}, "Invalid timestamp: foo"),
    ({"create_timestamp": "1764547200000foo"}, "Invalid timestamp: 1764547200000foo"),
    ({"fields": "alias,bar"}, "Invalid values: alias,bar"),
    ({"fields": ""}, "Invalid values: "),
    ({"limit": "foo"}, "Not a valid number: number must be >= 1 and <= 1000"),
    ({"limit": "0"}, "Not a valid number: number must be >= 1 and <= 1000"),
    ({"limit": "1001"}, "Not a valid number: number must be >= 1 and <= 1000"),
    ({"offset": "-1"}, "Not a valid number: number must be >= 0"),
    ({"sort": "foo.DESC"}, "Invalid sort param: foo.DESC"),
    ({"sort": "create_timestamp.foo"}, "Invalid sort param: create_timestamp.foo"),
    ({"sort": "create_timestamp."}, "Invalid sort param: create_timestamp."),
    ({"internal_metadata.": "foo"}, 'Invalid internal_metadata key: ""'),
    ({"internal_metadata.foo": ""}, 'Invalid internal_metadata value: ""'),
    ({"tag.role": ""}, 'Invalid tag value: ""'),
])
@ONE_BACKEND
def test_each_invalid_parameter_gets_vmapis_message(client, params, message) -> None:
    field = next(iter(params)).split(".")[0]
    refused(client, params, invalid(field, message))


def test_valid_values_vmapis_tests_send_are_accepted(client) -> None:
    now_ms = str(int(time.time() * 1000))
    for params in ({"brand": "lx"}, {"state": "destroyed"}, {"docker": "false"},
                   {"ram": "2048"}, {"uuids": f"{VALID_UUID},{VALID_UUID}"},
                   {"create_timestamp": now_ms},
                   {"create_timestamp": "2026-12-01T00:00:00.000Z"},
                   {"create_timestamp": "2026-12-01t00:00:00.000z"},  # RFC 3339, 5.6
                   {"fields": "*"}, {"fields": "role_tags"}, {"fields": "alias,zone_state"},
                   {"offset": "500"}, {"limit": "1000"}, {"sort": "docker.desc"},
                   {"sort": "billing_id.ASC"}, {"sort": "max_physical_memory"},
                   {"package_name": "sample-128M"}, {"billing_id": VALID_UUID}):
        assert client.get("/vms", params=params).status_code == 200, params


@pytest.mark.parametrize("name", ["predicate", "query"])
def test_an_empty_predicate_or_query_is_no_filter_and_a_given_one_is_refused(client,
                                                                              name) -> None:
    # VMAPI's _parsePredicate and _parseLdapFilter take an empty value as no filter
    vm_uuid = create_vm(client, alias="empty-filter")["vm_uuid"]
    listed = client.get("/vms", params={name: "", "alias": "empty-filter"})
    assert listed.status_code == 200, listed.text
    assert [vm["uuid"] for vm in listed.json()] == [vm_uuid]
    counted = client.head("/vms", params={name: "", "alias": "empty-filter"})
    assert counted.status_code == 200
    assert counted.headers["x-joyent-resource-count"] == "1"
    value = '{"eq": ["alias", "x"]}' if name == "predicate" else "(alias=x)"
    refused(client, {name: value}, invalid(
        name, "Not supported by vmledger: filter with the parameters of ListVms instead"))


def test_every_problem_is_named_at_once(client) -> None:
    response = client.get("/vms", params={"foo": "1", "brand": "foobar", "limit": "0"})
    assert [e["field"] for e in response.json()["errors"]] == ["foo", "brand", "limit"]


@pytest.mark.parametrize("bad", ['["uuid: 00000000-0000-0000-0000-000000000000"]',
                                 "00000000-0000-0000-0000-000000000000", '""', ""])
@ONE_BACKEND
def test_a_marker_that_is_no_object_is_refused(client, bad) -> None:
    marker = json.dumps(bad)
    refused(client, {"marker": marker},
            invalid("marker", f"Invalid marker: {marker}. Marker must represent an object."))


def test_markers_must_name_the_uuid_and_exactly_the_sort_key(client) -> None:
    no_uuid = json.dumps({"alias": "x"})
    refused(client, {"marker": no_uuid, "sort": "alias"}, invalid(
        "marker", f"Invalid marker: {no_uuid}. A marker needs to have a uuid property from "
        "which a strict total order can be established"))
    only_uuid = json.dumps({"uuid": "some-uuid"})
    refused(client, {"marker": only_uuid, "sort": "state.DESC"}, invalid(
        "marker", f"Invalid marker: {only_uuid}. All sort fields must be present in marker. "
        "Sort fields: state.DESC."))
    extra = json.dumps({"create_timestamp": 1764547200000, "uuid": str(uuid.uuid4())})
    refused(client, {"marker": extra}, invalid(
        "marker", f"Invalid marker: {extra}. All marker keys except uuid must be present in "
        "the sort parameter. Sort fields: undefined."))
    # an empty sort is a valid sort criteria to VMAPI: a marker of the uuid alone has every
    # key where it belongs, so only the missing sort key is told (marker.js)
    refused(client, {"marker": only_uuid, "sort": ""}, invalid(
        "marker", f"Invalid marker: {only_uuid}. All sort fields must be present in marker. "
        "Sort fields: ."))


def test_vmapi_markers_page_without_overlap_in_each_order(client) -> None:
    for n in range(5):
        create_vm(client, alias=f"page-{n}", ram=128 * (n % 2 + 1))
    for sort, keys in ((None, ["uuid"]), ("uuid.ASC", ["uuid"]), ("uuid.DESC", ["uuid"]),
                       ("ram.desc", ["uuid", "ram"]), ("max_physical_memory.ASC",
                                                ["uuid", "max_physical_memory"]),
                       ("create_timestamp.DESC", ["uuid", "create_timestamp"])):
        base = {"limit": 2, "alias": "page-", **({"sort": sort} if sort else {})}
        everything = [vm["uuid"] for vm in client.get(
            "/vms", params={k: v for k, v in base.items() if k != "limit"}).json()]
        walked, params = [], dict(base)
        while True:
            page = client.get("/vms", params=params)
            assert page.status_code == 200, (sort, page.text)
            assert page.headers["x-joyent-resource-count"] == "5"
            if not page.json():
                break
            walked += [vm["uuid"] for vm in page.json()]
            last = page.json()[-1]
            values = {"max_physical_memory": last["ram"]}
            params["marker"] = json.dumps({k: values.get(k, last.get(k)) for k in keys})
        assert walked == everything, sort


def test_filters_vmapi_has(client) -> None:
    vm_uuid = create_running_vm(client, alias="web-1", ram=512,
                                internal_metadata={"role": "front"},
                                image_uuid="6e1f0c3a-0000-4000-8000-000000000001")
    create_running_vm(client, alias="db-1", ram=1024)
    vm = client.get(f"/vms/{vm_uuid}").json()

    def listed(**params) -> list[str]:
        response = client.get("/vms", params=params)
        assert response.status_code == 200, response.text
        return [v["uuid"] for v in response.json()]

    assert listed(alias="web") == [vm_uuid]  # a prefix, as VMAPI's alias=web*
    assert listed(alias="eb") == []
    assert listed(uuid=vm_uuid) == [vm_uuid]
    assert listed(image_uuid="6e1f0c3a-0000-4000-8000-000000000001") == [vm_uuid]
    assert listed(ram="512") == [vm_uuid]
    assert listed(**{"internal_metadata.role": "front"}) == [vm_uuid]
    assert listed(**{"internal_metadata.role": "back"}) == []
    stamp = vm["create_timestamp"]
    assert listed(create_timestamp=stamp) == [vm_uuid]
    from datetime import datetime
    ms = int(datetime.fromisoformat(stamp).timestamp() * 1000)
    assert listed(create_timestamp=str(ms)) == [vm_uuid]
    assert listed(docker="true") == [] and len(listed(docker="false")) == 2
    assert listed(billing_id=VALID_UUID) == []
    projected = client.get("/vms", params={"uuid": vm_uuid, "fields": "uuid,alias,max_physical_memory"})
    assert projected.json() == [{"uuid": vm_uuid, "alias": "web-1", "max_physical_memory": 512}]


def test_fields_role_tags_answers_each_vm_with_no_role_tags(client) -> None:
    """VMAPI's validation takes ``role_tags`` (its vms.list test sends it) and answers each
    VM's role tags, ``[]`` for a VM with none; vmledger records no role tags, so every VM
    has none. It was an empty object, as if the field did not exist."""
    vm_uuid = create_running_vm(client, alias="tagged-roles")  # no job changes it meanwhile
    only = client.get("/vms", params={"uuid": vm_uuid, "fields": "role_tags"})
    assert only.status_code == 200 and only.json() == [{"role_tags": []}]
    some = client.get("/vms", params={"uuid": vm_uuid, "fields": "uuid,role_tags"}).json()
    assert some == [{"uuid": vm_uuid, "role_tags": []}]
    # "*" is every field and role_tags, as VMAPI's renderVms has it
    every = client.get("/vms", params={"uuid": vm_uuid, "fields": "*"}).json()
    plain = client.get("/vms", params={"uuid": vm_uuid}).json()
    assert every == [{**plain[0], "role_tags": []}]


# Found by a tester: sort=ram with {"uuid": <a VM>, "ram": "x"} answered 200 with the first
# page again, the marker's VM on it. Each sort key's value in a VMAPI marker has one type
# (service/api/vmapi_markers.py), null only where the sort column may be empty.
NOT_STRINGS = (1, 1.5, True, [1], {"a": 1}, float("inf"))
NOT_INTEGERS = ("x", "512", 1.5, True, [1], {"a": 1}, float("inf"), float("nan"), None,
                2.0 ** 60)  # whole, but past the integers a column holds (2**53 - 1)
WRONG_TYPES = [
    *((key, value) for key in ("uuid", "owner_uuid", "brand", "state", "tags")
      for value in (*NOT_STRINGS, None)),
    *((key, value) for key in ("alias", "image_uuid", "server_uuid", "billing_id")
      for value in NOT_STRINGS),
    *((key, value) for key in ("ram", "max_physical_memory") for value in NOT_INTEGERS),
    *(("create_timestamp", value) for value in (True, [1], {"a": 1}, "x", None, 1.5,
                                                float("inf"))),
    *(("docker", value) for value in ("x", "true", 1, [1], {"a": 1})),
]


@pytest.mark.parametrize(("key", "value"), WRONG_TYPES, ids=repr)
@ONE_BACKEND
def test_a_marker_whose_sort_value_has_the_wrong_type_is_refused_naming_marker(
        client, key, value) -> None:
    marker = json.dumps({"uuid": VALID_UUID, key: value})
    response = client.get("/vms", params={"sort": key, "marker": marker})
    assert response.status_code == 409, (key, value, response.text)
    body = response.json()
    assert body["code"] == "ValidationFailed"
    assert [(e["field"], e["code"]) for e in body["errors"]] == [("marker", "Invalid")], body
    assert body["errors"][0]["message"].startswith(f"Invalid marker: {marker}. ")


@pytest.mark.parametrize("uuid_value", [1, None, [VALID_UUID], {"a": 1}])
@ONE_BACKEND
def test_a_marker_whose_uuid_is_no_string_is_refused(client, uuid_value) -> None:
    for params in ({"marker": json.dumps({"uuid": uuid_value})},
                   {"sort": "ram", "marker": json.dumps({"uuid": uuid_value, "ram": 1})}):
        response = client.get("/vms", params=params)
        assert response.status_code == 409, (params, response.text)
        assert [e["field"] for e in response.json()["errors"]] == ["marker"]


def test_the_testers_forged_ram_marker_is_refused_and_a_true_one_pages_past_its_vm(
        client) -> None:
    vm_uuid = create_vm(client, alias="forged-0", ram=128)["vm_uuid"]
    create_vm(client, alias="forged-1", ram=256)
    for ram in ("x", [1], {"a": 1}, float("inf")):
        marker = json.dumps({"uuid": vm_uuid, "ram": ram})
        response = client.get("/vms", params={"sort": "ram", "marker": marker})
        assert response.status_code == 409, (ram, response.text)
    page = client.get("/vms", params={"sort": "ram", "alias": "forged-",
                                      "marker": json.dumps({"uuid": vm_uuid, "ram": 128})})
    assert [vm["alias"] for vm in page.json()] == ["forged-1"]
    # a whole number written as a float (Python's json writes 128.0) is that integer: JSON
    # does not tell them apart (found by a third tester: it was refused)
    page = client.get("/vms", params={"sort": "ram", "alias": "forged-",
                                      "marker": json.dumps({"uuid": vm_uuid, "ram": 128.0})})
    assert [vm["alias"] for vm in page.json()] == ["forged-1"]


@pytest.mark.parametrize(("key", "value"), [
    ("uuid", VALID_UUID), ("owner_uuid", VALID_UUID), ("brand", "joyent"), ("state", "x"),
    ("tags", ""), ("alias", "a"), ("alias", None), ("image_uuid", None),
    ("server_uuid", VALID_UUID), ("server_uuid", None), ("billing_id", None),
    ("ram", 0), ("max_physical_memory", 512), ("create_timestamp", 1764547200000),
    ("create_timestamp", "2026-01-01T00:00:00.000Z"), ("create_timestamp", "1764547200000"),
    ("docker", True), ("docker", False), ("docker", None),
], ids=repr)
def test_a_marker_of_each_sort_keys_own_type_is_taken(client, key, value) -> None:
    marker = json.dumps({"uuid": VALID_UUID, key: value})
    response = client.get("/vms", params={"sort": key, "marker": marker})
    assert response.status_code == 200, (key, value, response.text)


def test_every_sort_key_has_a_marker_type() -> None:
    from projections.vm_queries import SORT_FIELDS
    from service.api.vmapi_markers import MARKER_TYPES
    assert set(MARKER_TYPES) == set(SORT_FIELDS)


@ONE_BACKEND
def test_uuid_and_uuids_together_both_apply(client) -> None:
    # VMAPI reads uuid and passes uuids over; vmledger drops no parameter silently
    # (docs/vmapi-compatibility.md, "What differs on purpose")
    first, second = create_vm(client)["vm_uuid"], create_vm(client)["vm_uuid"]
    both = client.get("/vms", params={"uuid": first, "uuids": f"{first},{second}"})
    assert [vm["uuid"] for vm in both.json()] == [first]
    assert client.get("/vms", params={"uuid": first, "uuids": second}).json() == []


@ONE_BACKEND
@pytest.mark.parametrize("name, value", [("uuid", VALID_UUID + "\n"),
                                         ("alias", "web0\n"), ("uuids", VALID_UUID + "\n")])
def test_a_value_with_a_final_newline_is_refused_as_vmapi_refuses_it(client, name, value):
    # Python's $ matched before a final newline, JavaScript's (VMAPI's) does not
    response = client.get("/vms", params={name: value})
    assert response.status_code == 409, response.text
    assert [error["field"] for error in response.json()["errors"]] == [name]
