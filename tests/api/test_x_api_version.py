"""``x-api-version``, the other header VMAPI's restify reads the version from: its request's
version is ``Accept-Version || x-api-version || "*"`` (restify 4, ``Request.version``). Found
by a tester: a client sending only ``x-api-version: ~2`` was served version 1's DeleteVm
(api.md, "Contract: versions")."""

from __future__ import annotations

import pytest

from tests.api.helpers import assert_error, create_running_vm, error_fields, vm_body

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def test_x_api_version_alone_chooses_the_version(client) -> None:
    for header, served in (("~2", "2.0.0"), ("2.x", "2.0.0"), ("~1", "1.0.0"), ("*", "1.0.0"),
                           ("~9", "1.0.0")):
        response = client.get("/ping", headers={"x-api-version": header})
        assert response.status_code == 200
        assert response.headers["Api-Version"] == served, header


def test_x_api_version_gets_that_versions_behaviour(client) -> None:
    # version 2 answers bad input with 422 where version 1 answers 409
    response = client.post("/vms", json=vm_body(ram="lots"), headers={"x-api-version": "~2"})
    assert_error(response, 422, "ValidationFailed")
    # version 2's DeleteVm of a destroyed VM is a refusal; version 1's a job that succeeds
    vm = create_running_vm(client)
    assert client.delete(f"/vms/{vm}?sync=true").status_code == 202
    again = client.delete(f"/vms/{vm}", headers={"x-api-version": "~2"})
    assert_error(again, 409, "VmAlreadyDestroyed")
    assert again.headers["Api-Version"] == "2.0.0"


def test_accept_version_wins_over_x_api_version(client) -> None:
    # restify reads x-api-version only when Accept-Version is absent or empty
    for accept, other, served in (("~1", "~2", "1.0.0"), ("~2", "~1", "2.0.0"),
                                  ("*", "~2", "1.0.0"), ("~1", "nonsense", "1.0.0"),
                                  ("", "~2", "2.0.0")):
        response = client.get("/ping", headers={"Accept-Version": accept,
                                                "x-api-version": other})
        assert response.status_code == 200, (accept, other)
        assert response.headers["Api-Version"] == served, (accept, other)


def test_a_bad_x_api_version_is_refused_as_a_bad_accept_version(client) -> None:
    for header in ("~3", "nonsense"):
        response = client.get("/vms", headers={"x-api-version": header})
        body = assert_error(response, 400, "InvalidVersion")
        assert body["supported"] == ["1.0.0", "2.0.0"]
        assert header in body["message"]


def test_two_x_api_versions_are_refused_before_either_is_read(client) -> None:
    response = client.get("/vms", headers=[("x-api-version", "~2"), ("x-api-version", "7")])
    body = assert_error(response, 409, "ValidationFailed")  # no version was negotiated
    assert error_fields(body) == {"x-api-version": "Invalid"}
    assert "api-version" not in response.headers


def test_a_range_with_an_alternative_that_is_not_one_is_refused_whole(client) -> None:
    # a tester: "garbage || 2" and "2 || 2.0.0-beta" were served version 2 (node-semver
    # throws on the whole range, so restify serves none)
    for name in ("Accept-Version", "x-api-version"):
        for header in ("garbage || 2", "1 - 2 || 2", "2 || 2.0.0-beta", "~2 || ~3beta"):
            body = assert_error(client.get("/vms", headers={name: header}), 400,
                                "InvalidVersion")
            assert header in body["message"], (name, header)
        response = client.get("/ping", headers={name: "2.0.0+build.1"})
        assert response.headers["Api-Version"] == "2.0.0", name
