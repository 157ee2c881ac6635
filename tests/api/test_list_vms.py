"""ListVms and CountVms: ``GET /vms`` and ``HEAD /vms`` (api.md, "Endpoints", "Errors",
"VMAPI client compatibility": paging in a stable total order, counts whatever the page)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.api.helpers import (
    OTHER_OWNER,
    OWNER,
    V2,
    act_and_wait,
    assert_error,
    create_running_vm,
    create_vm,
    error_fields,
    get_vm,
    wait_job,
)
from tests.waiting import wait_until


def build_fleet(client) -> dict[str, dict]:
    """Five VMs in settled states, by name: web1 (running), web2 (stopped), db (running,
    other owner, kvm), broken (failed), gone (destroyed, other owner)."""
    web1 = create_running_vm(client, alias="web-1", ram=512, tags={"role": "web", "tier": 1})
    web2 = create_running_vm(client, alias="web-2", ram=1024, tags={"role": "web", "tier": 2})
    act_and_wait(client, web2, "stop")
    db = create_running_vm(client, alias="db", ram=2048, brand="kvm", owner_uuid=OTHER_OWNER,
                           tags={"role": "db"})
    broken = create_vm(client, alias="broken", ram=256,
                       internal_metadata={"force_provision_failure": True})
    wait_job(client, broken["job_uuid"])
    gone = create_running_vm(client, alias="gone", ram=128, owner_uuid=OTHER_OWNER)
    destroy = client.delete(f"/vms/{gone}")
    assert destroy.status_code == 202
    wait_job(client, destroy.json()["job_uuid"])
    names = {"web1": web1, "web2": web2, "db": db, "broken": broken["vm_uuid"], "gone": gone}
    return {name: get_vm(client, vm_uuid) for name, vm_uuid in names.items()}


def listed(client, **params) -> set[str]:
    """The uuids GET /vms answers for ``params`` (asserting 200 and a count that matches)."""
    response = client.get("/vms", params=params)
    assert response.status_code == 200, response.text
    vms = response.json()
    assert int(response.headers["x-joyent-resource-count"]) == len(vms)
    return {vm["uuid"] for vm in vms}


def test_each_filter_selects_exactly_the_matching_vms(client) -> None:
    fleet = build_fleet(client)
    uuid_of = {name: vm["uuid"] for name, vm in fleet.items()}

    def names(**params) -> set[str]:
        by_uuid = {v: k for k, v in uuid_of.items()}
        return {by_uuid[u] for u in listed(client, **params)}

    assert names() == set(fleet)
    assert names(owner_uuid=OWNER) == {"web1", "web2", "broken"}
    assert names(owner_uuid=OTHER_OWNER) == {"db", "gone"}
    assert names(state="running") == {"web1", "db"}
    assert names(state="stopped") == {"web2"}
    assert names(state="failed") == {"broken"}
    assert names(state="destroyed") == {"gone"}
    assert names(state="active") == {"web1", "web2", "db"}
    assert names(server_uuid=fleet["db"]["server_uuid"]) == {
        n for n, vm in fleet.items() if vm["server_uuid"] == fleet["db"]["server_uuid"]}
    assert names(brand="kvm") == {"db"}
    assert names(alias="web-2") == {"web2"}
    assert names(uuids=f"{uuid_of['web1']},{uuid_of['db']}") == {"web1", "db"}
    assert names(**{"tag.role": "web"}) == {"web1", "web2"}
    assert names(**{"tag.role": "web", "tag.tier": "2"}) == {"web2"}
    assert names(owner_uuid=OWNER, state="active", brand="joyent") == {"web1", "web2"}


def test_a_well_formed_filter_matching_nothing_is_200_and_an_empty_list(client) -> None:
    create_vm(client)
    for params in ({"owner_uuid": str(uuid.uuid4())}, {"alias": "nobody"},
                   {"tag.role": "none"}, {"uuids": str(uuid.uuid4())}, {"state": "destroyed"}):
        response = client.get("/vms", params=params)
        assert response.status_code == 200, params
        assert response.json() == []
        assert response.headers["x-joyent-resource-count"] == "0"


def test_offset_paging_walks_every_vm_once_in_a_stable_order(client) -> None:
    created = {create_vm(client, alias=f"vm-{i}")["vm_uuid"] for i in range(5)}
    everything = [vm["uuid"] for vm in client.get("/vms").json()]
    assert set(everything) == created
    pages, offset = [], 0
    while True:
        response = client.get("/vms", params={"limit": 2, "offset": offset})
        assert response.status_code == 200
        assert response.headers["x-joyent-resource-count"] == "5"
        page = [vm["uuid"] for vm in response.json()]
        pages.append(page)
        if len(page) < 2:  # the VMAPI client stops at a page shorter than the first
            break
        offset += len(page)
    assert [len(p) for p in pages] == [2, 2, 1]
    walked = [u for page in pages for u in page]
    assert walked == everything
    assert len(set(walked)) == len(walked)


def test_offset_and_limit_apply_after_filtering(client) -> None:
    mine = {create_vm(client)["vm_uuid"] for _ in range(3)}
    create_vm(client, owner_uuid=OTHER_OWNER)
    first = client.get("/vms", params={"owner_uuid": OWNER, "limit": 2})
    second = client.get("/vms", params={"owner_uuid": OWNER, "limit": 2, "offset": 2})
    assert first.headers["x-joyent-resource-count"] == "3"
    assert second.headers["x-joyent-resource-count"] == "3"
    walked = [vm["uuid"] for vm in first.json() + second.json()]
    assert sorted(walked) == sorted(mine)


@pytest.mark.parametrize("sort", [None, "ram.desc"])
def test_marker_paging_follows_x_next_marker_to_the_last_page(client, sort) -> None:
    for ram in (512, 128, 1024, 256, 128):
        create_vm(client, ram=ram)
    base = {"sort": sort} if sort else {}
    everything = [vm["uuid"] for vm in client.get("/vms", params=base).json()]
    walked, marker, pages = [], None, 0
    while True:
        params = {**base, "limit": 2, **({"marker": marker} if marker else {})}
        response = client.get("/vms", params=params)
        assert response.status_code == 200, response.text
        assert response.headers["x-joyent-resource-count"] == "5"
        walked += [vm["uuid"] for vm in response.json()]
        pages += 1
        marker = response.headers.get("x-next-marker")
        if marker is None:
            break
    assert pages == 3
    assert walked == everything


def test_sort_orders_by_the_field_either_way_case_insensitively(client) -> None:
    for ram, alias in ((512, "b"), (128, "c"), (1024, "a")):
        create_vm(client, ram=ram, alias=alias)

    def column(sort: str, field: str) -> list:
        response = client.get("/vms", params={"sort": sort})
        assert response.status_code == 200, response.text
        return [vm[field] for vm in response.json()]

    assert column("ram.desc", "ram") == [1024, 512, 128]
    assert column("RAM.ASC", "ram") == [128, 512, 1024]
    assert column("ram", "ram") == [128, 512, 1024]
    assert column("alias.desc", "alias") == ["c", "b", "a"]
    stamps = column("create_timestamp.desc", "create_timestamp")
    assert stamps == sorted(stamps, reverse=True)
    for field in ("uuid", "owner_uuid", "image_uuid", "server_uuid", "brand", "state", "alias",
                  "ram", "create_timestamp"):
        values = [v if v is not None else "" for v in column(f"{field}.asc", field)]
        assert values == sorted(values), field
    # VMAPI's other sort keys; those vmledger records no value of order by uuid
    assert column("max_physical_memory.DESC", "ram") == [1024, 512, 128]
    for field in ("billing_id", "docker"):
        for order, descending in (("ASC", False), ("desc", True)):
            uuids = column(f"{field}.{order}", "uuid")
            assert uuids == sorted(uuids, reverse=descending), field
    assert len(column("tags.asc", "uuid")) == 3


def test_without_a_limit_the_page_holds_every_match(client) -> None:
    created = {create_vm(client)["vm_uuid"] for _ in range(3)}
    response = client.get("/vms")
    assert {vm["uuid"] for vm in response.json()} == created
    assert "x-next-marker" not in response.headers


def test_head_vms_answers_only_the_count_of_matches(client) -> None:
    for owner in (OWNER, OWNER, OTHER_OWNER):
        create_vm(client, owner_uuid=owner)
    everything = client.head("/vms")
    assert everything.status_code == 200
    assert everything.headers["x-joyent-resource-count"] == "3"
    assert everything.content == b""
    mine = client.head("/vms", params={"owner_uuid": OWNER, "limit": 1})
    assert mine.headers["x-joyent-resource-count"] == "2"
    assert mine.content == b""


def test_list_refuses_bad_parameters_naming_each(client) -> None:
    cases = [
        ({"colour": "blue"}, "colour"),
        ({"owner_uuid": "nope"}, "owner_uuid"),
        ({"server_uuid": "123"}, "server_uuid"),
        ({"uuids": f"{uuid.uuid4()},nope"}, "uuids"),
        ({"state": "sleeping"}, "state"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"sort": "colour.asc"}, "sort"),
        ({"sort": "ram.sideways"}, "sort"),
        ({"marker": "!!!"}, "marker"),
        ({"consistency": "sometimes"}, "consistency"),
    ]
    for params, field in cases:
        v1 = assert_error(client.get("/vms", params=params), 409, "ValidationFailed")
        assert field in error_fields(v1), (params, v1)
        assert_error(client.get("/vms", params=params, headers=V2), 422, "ValidationFailed")
    unknown = client.get("/vms", params={"colour": "blue"}).json()
    assert unknown["errors"] == [
        {"field": "colour", "code": "Invalid", "message": "Invalid parameter"}]


def test_limit_at_its_bounds_is_accepted(client) -> None:
    create_vm(client)
    assert client.get("/vms", params={"limit": 1}).status_code == 200
    assert client.get("/vms", params={"limit": 1000}).status_code == 200


def test_offset_with_marker_is_refused_as_conflicting_parameters(client) -> None:
    for _ in range(2):
        create_vm(client)
    marker = client.get("/vms", params={"limit": 1}).headers["x-next-marker"]
    response = client.get("/vms", params={"marker": marker, "offset": 1})
    body = assert_error(response, 409, "ValidationFailed")  # VMAPI's shape
    assert body["errors"] == [{"fields": ["offset", "marker"], "code": "ConflictingParameters",
                               "message": "offset and marker cannot be used at the same time"}]
    assert client.get("/vms", params={"marker": marker}).status_code == 200
    # VMAPI tests ``offset && marker``: an offset of 0 skips nothing and is no conflict
    assert client.get("/vms", params={"marker": marker, "offset": 0}).status_code == 200


def test_eventual_consistency_is_accepted(client) -> None:
    create_vm(client)
    response = client.get("/vms", params={"consistency": "eventual"})
    assert response.status_code == 200


def test_a_marker_from_another_sort_or_a_forged_one_is_refused_naming_marker(client) -> None:
    import base64
    import json

    for ram in (128, 256, 512):
        create_vm(client, ram=ram)
    by_ram = client.get("/vms", params={"sort": "ram", "limit": 1}).headers["x-next-marker"]
    forged = base64.urlsafe_b64encode(
        json.dumps([{"a": 1}, str(uuid.uuid4())]).encode()).decode().rstrip("=")
    for params in ({"sort": "alias", "marker": by_ram}, {"marker": by_ram},
                   {"marker": forged}, {"sort": "ram", "marker": forged}):
        response = client.get("/vms", params={**params, "limit": 1})
        body = assert_error(response, 409, "ValidationFailed")
        assert error_fields(body) == {"marker": "Invalid"}, params
    assert client.get("/vms", params={"sort": "ram", "marker": by_ram}).status_code == 200


def test_between_pages_offsets_shift_and_markers_keep_their_place(client) -> None:
    # docs/vmapi-compatibility.md, "Paging by offset": a VM entering the order ahead of the
    # offset between two pages repeats one VM and skips another; a marker lists each once
    mine = {create_vm(client)["vm_uuid"] for _ in range(4)}
    base = {"sort": "create_timestamp.desc", "limit": 2}
    first = client.get("/vms", params=base)
    newest = datetime.fromisoformat(first.json()[0]["create_timestamp"])
    # the new VM is newer than every listed one to the millisecond: first in the order
    wait_until(lambda: datetime.now(UTC) >= newest + timedelta(milliseconds=2))
    create_vm(client)
    listed = [vm["uuid"] for vm in first.json()]
    by_offset = listed + [vm["uuid"] for vm in client.get(
        "/vms", params={**base, "offset": 2}).json()]
    assert len(by_offset) == 4 and len(set(by_offset)) == 3
    by_marker = listed + [vm["uuid"] for vm in client.get(
        "/vms", params={**base, "marker": first.headers["x-next-marker"]}).json()]
    assert sorted(by_marker) == sorted(mine)
