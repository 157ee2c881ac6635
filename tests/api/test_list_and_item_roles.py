"""What a role may list it may read one of (api.md, "Contract: roles"; operations.md, "Tokens
and roles"), but where ``service.api.auth.LIST_ONLY`` says why not. Found by a tester: an
analyst listed servers and networks but was refused one (403), and the docs said otherwise for
each."""

from __future__ import annotations

import re

from service.api.auth import LIST_ONLY, ROUTE_ROLES
from tests.api.helpers import vm_body
from tests.api.test_authorization import AGENT_SERVER, Authed, authed, bearer  # noqa: F401


def test_a_role_that_may_list_a_kind_may_read_one_of_it_and_the_other_way_round() -> None:
    # found by a tester: an analyst could list servers and networks but not read one
    # (403), and the docs said otherwise for each
    pairs = [(path, item) for method, path in ROUTE_ROLES if method == "GET"
             for item_method, item in ROUTE_ROLES if item_method == "GET"
             and re.fullmatch(re.escape(path) + r"/\{\w+\}", item)]
    assert {path for path, _ in pairs} >= {"/vms", "/jobs", "/servers", "/volumes", "/networks"}
    for path, item in pairs:
        listing, one = ROUTE_ROLES[("GET", path)], ROUTE_ROLES[("GET", item)]
        list_only = {role for (where, role) in LIST_ONLY if where == path}
        assert listing - one == list_only, (path, item)
        assert one <= listing, (path, item)
    assert all(role in ROUTE_ROLES[("GET", path)] for path, role in LIST_ONLY)


def test_a_read_under_an_item_allows_the_roles_of_the_item() -> None:
    # found by a reviewer: an analyst read one job (GET /jobs/{uuid}) but was refused its
    # wait (/jobs/{uuid}/wait, 403), which answers the same job once it ends
    pairs = [(item, under) for method, item in ROUTE_ROLES if method == "GET"
             and re.search(r"/\{\w+\}$", item)
             for under_method, under in ROUTE_ROLES if under_method == "GET"
             and re.fullmatch(re.escape(item) + r"/[a-z]+", under)]
    assert ("/jobs/{job_uuid}", "/jobs/{job_uuid}/wait") in pairs
    assert ("/vms/{vm_uuid}", "/vms/{vm_uuid}/history") in pairs
    for item, under in pairs:
        assert ROUTE_ROLES[("GET", under)] == ROUTE_ROLES[("GET", item)], (item, under)


def test_an_analyst_reads_one_server_volume_network_and_job_but_not_one_vm(
        authed: Authed) -> None:
    operator = bearer("operator")
    network = authed.http.post("/networks", headers=operator, json={
        "name": "an", "subnet": "10.6.0.0/24", "provision_start_ip": "10.6.0.10",
        "provision_end_ip": "10.6.0.20"}).json()
    volume = authed.http.post("/volumes", headers=operator, json={"name": "an"}).json()
    created = authed.http.post("/vms", headers=operator, json=vm_body()).json()
    for url in (f"/servers/{AGENT_SERVER}", f"/networks/{network['uuid']}",
                f"/volumes/{volume['uuid']}", f"/jobs/{created['job_uuid']}"):
        response = authed.as_("analyst", "GET", url)
        assert response.status_code == 200, (url, response.text)
    waited = authed.as_("analyst", "GET", f"/jobs/{created['job_uuid']}/wait",
                        params={"timeout": 10})
    assert waited.status_code == 200, waited.text
    assert waited.json()["uuid"] == created["job_uuid"]
    assert authed.as_("analyst", "GET", f"/vms/{created['vm_uuid']}").status_code == 403
    listed = authed.as_("analyst", "GET", "/vms", params={"uuid": created["vm_uuid"]})
    assert [vm["uuid"] for vm in listed.json()] == [created["vm_uuid"]]
