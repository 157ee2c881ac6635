"""No error message repeats more than ``ECHOED`` (100) characters of one value a client sent,
then the mark "…" (api.md, "Contract: errors"). Found by a tester: ``create_timestamp``,
``sort``, ``fields`` and ``uuids`` of ListVms were echoed up to the 1,000-character cap of the
whole message. Every query parameter of every route the OpenAPI schema lists, every id of
its paths and every field of the command bodies is sent 5,000 characters long here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from domain.json_input import CUT_MARK, ECHOED
from service.api.app import create_app
from service.container import Services
from service.settings import Settings
from tests.api.helpers import vm_body

# a sweep of every route, parameter and field (about 30 s): CI runs it with the slow tests
pytestmark = pytest.mark.slow

LONG = 5000
UUID = "930896af-bf8c-48d4-885c-6573a94b1853"
# Each shape is one value, made of characters no message puts next to it, so that what a
# message carries of it is its longest run of them: plain text, digits (a number's or a
# timestamp's parser), a uuid's (a uuid list's), a valid start going wrong later.
SHAPES = {
    "letters": "Z" * LONG,
    "digits": "7" * LONG,
    "uuid-then-more": UUID + "Z" * LONG,
    "uuid-list": ",".join([UUID] * 2) + "," + "Z" * LONG,
    "instant-then-digits": "2024-01-01T00:00:00." + "7" * LONG + "Z",
    "sort-like": "ram." + "Z" * LONG,
    "address-like": "10.0.0." + "7" * LONG,
}
_OPENAPI = create_app(Settings()).openapi()


def carried(text: str, value: str) -> int:
    """The most consecutive characters of ``value`` that ``text`` holds."""
    longest = 0
    for start in range(len(text)):
        size = longest + 1
        while start + size <= len(text) and text[start:start + size] in value:
            longest, size = size, size + 1
    return longest


def messages(answer: Any) -> list[str]:
    """The top-level message and each ``errors`` entry's of an error answer."""
    try:
        body = answer.json()
    except ValueError:
        return [answer.text]
    if not isinstance(body, dict):
        return []
    entries = body.get("errors") or []
    return [str(body.get("message", ""))] + [str(e.get("message", "")) for e in entries
                                             if isinstance(e, dict)]


def assert_bounded(answer: Any, value: str, what: str) -> None:
    """No message of ``answer`` carries more than ``ECHOED`` characters of ``value``."""
    if answer.status_code < 400:
        return
    for message in messages(answer):
        assert carried(message, value) <= ECHOED, (what, answer.status_code, message[:300])
        run = max(re.findall(r"Z+|7+", message), key=len, default="")
        if len(run) == ECHOED:  # cut, so marked
            assert run + CUT_MARK in message, (what, message[:300])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict]]:
    """A SQLite service (what a message repeats does not depend on the backend) holding a
    running VM, its job, a server, a network and a volume, to name in paths."""
    folder: Path = tmp_path_factory.mktemp("echoed")
    services = Services.build(Settings(
        database_url=f"sqlite:///{folder / 'vmledger.db'}", sim_servers=2,
        sim_server_ram_mib=65_536, projection_poll_s=0.01, worker_poll_s=0.02,
        read_timeout_s=5.0))
    try:
        with TestClient(create_app(services=services, background=True)) as http:
            created = http.post("/vms", json=vm_body()).json()
            waited = http.get(f"/jobs/{created['job_uuid']}/wait", params={"timeout": 10})
            assert waited.json()["execution"] == "succeeded", waited.text
            server = http.get("/servers").json()[0]
            network = http.post("/networks", json={
                "name": "echoed", "subnet": "10.9.0.0/24", "provision_start_ip": "10.9.0.10",
                "provision_end_ip": "10.9.0.200"}).json()
            volume = http.post("/volumes", json={"name": "echoed"}).json()
            ids = {"vm_uuid": created["vm_uuid"], "job_uuid": created["job_uuid"],
                   "server_uuid": server["uuid"], "network_uuid": network["uuid"],
                   "volume_uuid": volume["uuid"], "boot_id": server["boot_id"]}
            yield http, ids
    finally:
        services.close()


def _path(template: str, ids: dict[str, str]) -> str:
    return re.sub(r"\{([^}]*)\}", lambda m: ids[m.group(1)], template)


QUERIES = sorted(
    (method.upper(), path, parameter["name"])
    for path, operations in _OPENAPI["paths"].items() if path != "/changes"  # an endless stream
    for method, operation in operations.items() if method != "head"  # GET's, without body
    for parameter in operation.get("parameters", []) if parameter["in"] == "query"
)


@pytest.mark.parametrize(("method", "path", "name"), QUERIES,
                         ids=[f"{m} {p} {n}" for m, p, n in QUERIES])
def test_no_query_parameter_is_repeated_whole_in_a_refusal(world, method, path, name):
    http, ids = world
    for shape, value in SHAPES.items():
        params = {name: value}
        if method != "GET" and name != "sync":
            params["sync"] = "false"  # no wait for a job (none runs past the refusal)
        answer = http.request(method, _path(path, ids), params=params,
                              json=None if method == "GET" else {})
        assert_bounded(answer, value, f"{method} {path}?{name}= ({shape})")


ACTED_ON = sorted(
    (method.upper(), path, action)
    for path, operations in _OPENAPI["paths"].items() if "{" in path
    for method, operation in operations.items() if method != "head"
    for action in next((p["schema"].get("enum") for p in operation.get("parameters", [])
                        if p["name"] == "action"), None) or [None]
)


@pytest.mark.parametrize(("method", "path", "action"), ACTED_ON,
                         ids=[f"{m} {p} {a}" for m, p, a in ACTED_ON])
def test_no_path_id_is_repeated_whole_in_a_refusal(world, method, path, action):
    """Each id of the path 5,000 characters long, and each action the route takes."""
    http, _ids = world
    for shape, value in SHAPES.items():
        params = {} if action is None else {"action": action}
        if method != "GET":
            params["sync"] = "false"
        answer = http.request(method, re.sub(r"\{[^}]*\}", value, path), params=params,
                              json=None if method == "GET" else {})
        assert_bounded(answer, value, f"{method} {path} {action} ({shape})")


def _bodies(ids: dict[str, str]) -> dict[str, tuple[str, str, dict, dict, str]]:
    """By a name: (method, path, query, a valid body, its schema) of each command route."""
    vm = f"/vms/{ids['vm_uuid']}"
    actions = ("update", "add_nics", "remove_nics", "stop", "quarantine")
    return {
        "CreateVm": ("POST", "/vms", {}, vm_body(), "CreateVmRequest"),
        **{action: ("POST", vm, {}, {"action": action}, "VmActionRequest")
           for action in actions},
        "DeleteVm": ("DELETE", vm, {}, {}, "DeleteVmBody"),
        "inventory": ("PUT", "/vms", {"server_uuid": ids["server_uuid"]},
                      {"boot_id": ids["boot_id"], "generation": 99, "vms": {}},
                      "InventoryReport"),
        "report": ("PUT", vm, {}, {"state": "running", "server_uuid": ids["server_uuid"],
                                   "boot_id": ids["boot_id"], "generation": 99}, "VmReport"),
        "agent": ("PUT", vm, {}, {"state": "running"}, "AgentVmBody"),
        "CreateServer": ("POST", "/servers", {}, {"hostname": "h", "ram_mib": 1024, "cpus": 2},
                         "CreateServerRequest"),
        "CreateVolume": ("POST", "/volumes", {}, {"name": "other"}, "CreateVolumeRequest"),
        "attach_network": ("POST", f"/volumes/{ids['volume_uuid']}",
                           {"action": "attach_network"},
                           {"network_uuid": ids["network_uuid"], "address": "10.9.0.5"},
                           "AttachNetworkRequest"),
        "CreateNetwork": ("POST", "/networks", {}, {
            "name": "other", "subnet": "10.8.0.0/24", "provision_start_ip": "10.8.0.10",
            "provision_end_ip": "10.8.0.200"}, "CreateNetworkRequest"),
    }


BODIES = ["CreateVm", "update", "add_nics", "remove_nics", "stop", "quarantine", "DeleteVm",
          "inventory", "report", "agent", "CreateServer", "CreateVolume", "attach_network",
          "CreateNetwork"]
# Fewer shapes for bodies (each field takes every form): plain text, a number's digits, a
# uuid going wrong, an address going wrong
BODY_SHAPES = ("letters", "digits", "uuid-then-more", "address-like")


def _forms(value: str, ids: dict[str, str]) -> Iterator[Any]:
    """``value`` where a field takes text, a list, an object (as a key and as a value), and
    inside a ``networks`` entry, a ``persistence`` row and a report's VM."""
    yield from (value, [value], {value: "x"}, {"k": value})
    yield from ([{"ipv4_uuid": value}], [{"uuid": value}], [{"name": value}],
                [{"ipv4_uuid": ids["network_uuid"], "ip": value}], {"running": value},
                {ids["vm_uuid"]: {"state": value}}, {"triton.cns.reverse_ptr": value},
                {"triton.cns.disable": value})


@pytest.mark.parametrize("command", BODIES)
def test_no_body_field_is_repeated_whole_in_a_refusal(world, command):
    http, ids = world
    method, path, query, valid, schema = _bodies(ids)[command]
    for field in [*_OPENAPI["components"]["schemas"][schema].get("properties", {}), "unknown"]:
        for shape in BODY_SHAPES:
            value = SHAPES[shape]
            for form in _forms(value, ids):
                params = query if method == "PUT" else {**query, "sync": "false"}
                answer = http.request(method, path, params=params, json={**valid, field: form})
                assert_bounded(answer, value, f"{command} {field}: {str(form)[:40]} ({shape})")


def test_no_marker_field_is_repeated_whole_in_a_refusal(world):
    """A VMAPI marker's own values (its uuid, its sort value) are cut as the marker is."""
    http, _ids = world
    for shape, value in SHAPES.items():
        for marker in (f'{{"uuid": "{value}"}}', f'{{"uuid": "{UUID}", "ram": "{value}"}}',
                       f'{{"uuid": "{UUID}", "create_timestamp": "{value}"}}'):
            answer = http.get("/vms", params={"marker": marker, "sort": "ram"})
            assert_bounded(answer, value, f"marker {marker[:40]} ({shape})")


@pytest.mark.parametrize("name", ["create_timestamp", "sort", "fields", "uuids"])
def test_list_vms_names_the_first_hundred_characters_of_a_bad_value(world, name):
    http, _ids = world
    answer = http.get("/vms", params={name: "Z" * LONG})
    assert answer.status_code == 409, answer.text
    message = next(e["message"] for e in answer.json()["errors"] if e["field"] == name)
    assert message.endswith(": " + "Z" * ECHOED + CUT_MARK), message[:200]
