"""ListVms' ``tag.K=V`` and ``internal_metadata.K=V`` filters in number: up to the stated
limit (``MAX_PROPERTY_FILTERS``) they are answered in one grouped query a table, and past it
refused as bad input (409 ``ValidationFailed``). Each filter used to be a clause of its own:
PostgreSQL answered 503 from about 54 of them, SQLite ("Expression tree is too large") from
about 1,000."""

from __future__ import annotations

from service.api.list_vms_params import MAX_PROPERTY_FILTERS
from tests.api.helpers import create_running_vm

TAGS = MAX_PROPERTY_FILTERS // 2
METADATA = MAX_PROPERTY_FILTERS - TAGS


def _filters(tags: dict[str, str], metadata: dict[str, str]) -> dict[str, str]:
    return {**{f"tag.{k}": v for k, v in tags.items()},
            **{f"internal_metadata.{k}": v for k, v in metadata.items()}}


def test_as_many_filters_as_the_limit_select_exactly_the_vms_with_every_pair(client) -> None:
    tags = {f"t{i}": f"v{i}" for i in range(TAGS)}
    metadata = {f"m{i}": str(i) for i in range(METADATA)}
    every = create_running_vm(client, alias="every", tags=tags, internal_metadata=metadata)
    # one tag's value differs: not a match, though it has every key and the other values
    create_running_vm(client, alias="almost", tags={**tags, "t0": "other"},
                      internal_metadata=metadata)
    create_running_vm(client, alias="none")
    params = _filters(tags, metadata)
    assert len(params) == MAX_PROPERTY_FILTERS
    response = client.get("/vms", params=params)
    assert response.status_code == 200, response.text
    assert [vm["uuid"] for vm in response.json()] == [every]
    assert client.head("/vms", params=params).headers["x-joyent-resource-count"] == "1"
    # the same keys under the other prefix match nothing: each table is asked its own pairs
    swapped = _filters({f"m{i}": str(i) for i in range(METADATA)}, {})
    assert client.get("/vms", params=swapped).json() == []


def test_more_filters_than_the_limit_are_refused_naming_the_limit(client) -> None:
    for count in (MAX_PROPERTY_FILTERS + 1, 60, 1200):
        params = _filters({f"k{i}": "v" for i in range(count - 1)}, {"k": "v"})
        for method in ("GET", "HEAD"):
            response = client.request(method, "/vms", params=params)
            assert response.status_code == 409, (count, method, response.text)
        body = client.get("/vms", params=params).json()
        assert body["message"] == "Invalid Parameters"
        assert body["errors"] == [{
            "field": "tag", "code": "Invalid",
            "message": f"at most {MAX_PROPERTY_FILTERS} tag.K and internal_metadata.K "
                       f"filters in all (got {count})"}], count
