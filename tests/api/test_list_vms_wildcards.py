"""``*`` in ListVms' ``tag.K=V`` and ``internal_metadata.K=V`` values: any run of characters,
as in VMAPI, which puts the value into its LDAP filter unescaped (sdc-vmapi
``lib/apis/moray.js``, ``_addTagsFilter``, ``_addInternalMetadataFilter``): ``tag.K=*`` is
every VM with a tag K, ``tag.K=d*`` a prefix match. Found by a tester: ``tag.K=*`` matched
only a tag whose value is the text ``*``. Every other character is itself, SQL's ``LIKE``
specials (``%``, ``_``) and the escape included, and matching is case-sensitive on both
backends (api.md, ``GET /vms``)."""

from __future__ import annotations

from typing import Any

from tests.api.helpers import create_vm

ROLES: dict[str, Any] = {
    "db": "db", "dbx": "dbx", "web": "web", "pct": "d%b_", "under": "d_x", "bang": "d!b",
    "upper": "DB", "bool": True, "num": 5, "star": "a*b", "empty": "", "back": "c\\d",
}


def _fleet(client) -> dict[str, str]:
    """One VM a role (its tag ``role`` and internal_metadata ``role``), and one with none."""
    uuids = {}
    for name, role in ROLES.items():
        uuids[name] = create_vm(client, alias=f"vm-{name}", tags={"role": role, "env": "prod"},
                                internal_metadata={"role": str(role)})["vm_uuid"]
    uuids["none"] = create_vm(client, alias="vm-none", tags={"env": "prod"})["vm_uuid"]
    return uuids


def _names(client, uuids: dict[str, str], **params: str) -> set[str]:
    by_uuid = {uuid: name for name, uuid in uuids.items()}
    response = client.get("/vms", params=params)
    assert response.status_code == 200, response.text
    found = {by_uuid[vm["uuid"]] for vm in response.json()}
    assert int(response.headers["x-joyent-resource-count"]) == len(found)
    counted = client.head("/vms", params=params)  # CountVms counts what ListVms lists
    assert counted.headers["x-joyent-resource-count"] == str(len(found)), params
    return found


def test_a_star_in_a_tag_filter_matches_any_run_of_characters(client) -> None:
    uuids = _fleet(client)

    def tagged(value: str, **more: str) -> set[str]:
        return _names(client, uuids, **{"tag.role": value}, **more)

    assert tagged("*") == set(ROLES)  # every VM with the tag, whatever its value
    assert tagged("d*") == {"db", "dbx", "pct", "under", "bang"}  # not "DB": case counts
    assert tagged("*b") == {"db", "web", "bang", "star"}
    assert tagged("*x") == {"dbx", "under"}
    assert tagged("*b*") == {"db", "dbx", "web", "pct", "bang", "star"}
    assert tagged("d*b*") == {"db", "dbx", "pct", "bang"}
    assert tagged("D*") == {"upper"}
    assert tagged("**") == set(ROLES)
    assert tagged("t*") == {"bool"}  # a boolean's text, as tag.K=true matches it
    assert tagged("5*") == {"num"}
    assert tagged("d*", **{"tag.env": "prod"}) == tagged("d*")
    assert tagged("d*", **{"tag.env": "dev"}) == set()
    assert tagged("d*", **{"tag.env": "p*"}) == tagged("d*")


def test_every_other_character_of_a_wildcard_filter_is_itself(client) -> None:
    uuids = _fleet(client)

    def tagged(value: str) -> set[str]:
        return _names(client, uuids, **{"tag.role": value})

    # LIKE's own wildcards and our escape are plain characters here
    assert tagged("d%*") == {"pct"}
    assert tagged("d_*") == {"under"}
    assert tagged("d!*") == {"bang"}
    assert tagged("c\\*") == {"back"}
    assert tagged("*\\*") == {"back"}
    assert tagged("c\\") == set()
    assert tagged("*_") == {"pct"}
    assert tagged("%*") == set()
    assert tagged("_*") == set()
    # with no star the value is matched exactly, as before
    assert tagged("d%b_") == {"pct"}
    assert tagged("d") == set()


def test_a_star_in_an_internal_metadata_filter_is_a_wildcard_too(client) -> None:
    uuids = _fleet(client)

    def meta(value: str) -> set[str]:
        return _names(client, uuids, **{"internal_metadata.role": value})

    assert meta("*") == set(ROLES)
    assert meta("d*") == {"db", "dbx", "pct", "under", "bang"}
    assert meta("d_*") == {"under"}
    assert _names(client, uuids, **{"internal_metadata.role": "w*", "tag.role": "*x"}
                  ) == set()
    assert _names(client, uuids, **{"internal_metadata.role": "w*", "tag.role": "*b*"}
                  ) == {"web"}
