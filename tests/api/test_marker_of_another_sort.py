"""A ListVms ``x-next-marker`` is a position in its page's order, so it goes with the query's
``sort`` (docs/api.md, "Reads"). Sent with another sort (or none) it is still refused, and the
refusal says why: a tester's marker from ``sort=create_timestamp.desc`` sent without ``sort``
got a bare "Invalid marker". The filters are no part of the position: a marker sent with
other filters continues after that position among the VMs they match."""

from __future__ import annotations

from projections.vm_markers import encode_marker
from tests.api.helpers import OTHER_OWNER, OWNER, assert_error, create_vm


def _marker(client, **params) -> str:
    page = client.get("/vms", params={**params, "limit": 2})
    assert page.status_code == 200, page.text
    return page.headers["x-next-marker"]


def test_a_marker_sent_with_another_sort_is_refused_saying_which_sort_it_goes_with(
        client) -> None:
    for ram in (128, 256, 512):
        create_vm(client, ram=ram)
    marker = _marker(client, sort="create_timestamp.desc")
    for params, asked in (({}, "create_timestamp.asc"), ({"sort": "ram"}, "ram.asc"),
                          ({"sort": "create_timestamp"}, "create_timestamp.asc")):
        body = assert_error(client.get("/vms", params={**params, "marker": marker}), 409,
                            "ValidationFailed")
        [error] = body["errors"]
        assert error["field"] == "marker" and error["code"] == "Invalid"
        assert error["message"] == (
            "Invalid marker: it was made for sort=create_timestamp.desc; send that sort "
            f"with it (this request's is {asked})")
    # the same sort, in another case, is the same order
    again = client.get("/vms", params={"sort": "CREATE_TIMESTAMP.DESC", "marker": marker})
    assert again.status_code == 200, again.text
    assert len(again.json()) == 1


def test_a_forged_marker_is_refused_without_naming_what_it_claims(client) -> None:
    """Only a sort vmledger could have made a marker for is named back; another is refused
    saying why, without repeating it (it was a bare "Invalid marker")."""
    vm = "930896af-bf8c-48d4-885c-6573a94b1853"
    for made_for in ("no_such.asc", "<script>", "ram.sideways"):
        marker = encode_marker(made_for, 1, vm)
        body = assert_error(client.get("/vms", params={"marker": marker}), 409,
                            "ValidationFailed")
        message = body["errors"][0]["message"]
        assert message == (f"Invalid marker: {marker}. Marker was made for no sort a page is "
                           "listed in: send a page's x-next-marker as it came"), made_for
        assert made_for not in message


def test_a_marker_sent_with_other_filters_continues_after_its_position(client) -> None:
    mine = [create_vm(client, ram=256)["vm_uuid"] for _ in range(2)]
    create_vm(client, owner_uuid=OTHER_OWNER)
    mine.append(create_vm(client, ram=256)["vm_uuid"])
    everyone = [vm["uuid"] for vm in client.get("/vms").json()]
    marker = _marker(client)  # after the second VM of every owner's listing
    rest = client.get("/vms", params={"marker": marker, "owner_uuid": OWNER})
    assert rest.status_code == 200, rest.text
    assert [vm["uuid"] for vm in rest.json()] == [
        uuid for uuid in everyone[2:] if uuid in mine]
