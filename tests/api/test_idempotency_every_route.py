"""Every command route honours ``Idempotency-Key`` (api.md, "Concurrency and idempotency"):
a repeat with the same key is answered as the first was and appends nothing; the key sent
with another request is ``422 IdempotencyKeyReused`` and appends nothing. The routes are
walked from the app, so a new route that writes must be listed here, as a command or as
not one (found by a tester: volume, network and server commands ignored the key, so two
POST /volumes with one key made two volumes, and attach then detach with one key did both).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from service import console
from service.api.app import api_routers
from service.settings import Settings
from tests.api.helpers import assert_error, vm_body

NET = {"name": "idemnet", "subnet": "10.20.0.0/24", "provision_start_ip": "10.20.0.10",
       "provision_end_ip": "10.20.0.20"}
SERVER = {"hostname": "cn-idem", "ram_mib": 4096, "cpus": 4}
ADDRESS = {"network_uuid": "55555555-1111-4111-8111-111111111111", "address": "1.2.3.9"}

# Routes that write but are no client command: agents' reports are ordered by their own
# generation (or last_modified), so a repeat changes nothing; the simulator's controls change
# the simulated world, not the log; the console's audit only reads.
NOT_COMMANDS = {
    ("PUT", "/vms/{vm_uuid}"), ("PUT", "/vms"),
    ("POST", "/console/fragments/audit"),
}
Request = tuple[str, str, Any]  # method, URL, JSON body


class World:
    """The resources a case acts on, made as it needs them, through the API."""

    def __init__(self, paused: Any):
        self.http = paused.http
        self.paused = paused

    def ok(self, method: str, url: str, body: Any = None) -> dict[str, Any]:
        response = self.http.request(method, url, json=body)
        assert response.status_code < 300, response.text
        self.paused.run_jobs()
        return response.json()

    def vm(self, **overrides: Any) -> str:
        return self.ok("POST", "/vms", vm_body(**overrides))["vm_uuid"]

    def network(self) -> str:
        return self.ok("POST", "/networks", {**NET, "name": "n1"})["uuid"]

    def volume(self) -> str:
        return self.ok("POST", "/volumes", {"name": "vol"})["uuid"]

    def server(self) -> str:
        return self.ok("POST", "/servers", {**SERVER, "hostname": "cn-x"})["uuid"]


def _vm_action(action: str, other: str, body: Any = None, *,
               setup: Callable[[World, str], None] | None = None
               ) -> Callable[[World], tuple[Request, Request]]:
    def make(world: World) -> tuple[Request, Request]:
        vm = world.vm()
        if setup is not None:
            setup(world, vm)
        return (("POST", f"/vms/{vm}?action={action}", body),
                ("POST", f"/vms/{vm}?action={other}", body))
    return make


def _nic_vm(world: World) -> tuple[Request, Request]:
    network = world.network()
    vm = world.vm(networks=[network])
    mac = world.ok("GET", f"/vms/{vm}")["nics"][0]["mac"]
    return (("POST", f"/vms/{vm}?action=remove_nics", {"macs": [mac]}),
            ("POST", f"/vms/{vm}?action=add_nics", {"networks": [network]}))


def _add_nics(world: World) -> tuple[Request, Request]:
    network, vm = world.network(), world.vm()
    return (("POST", f"/vms/{vm}?action=add_nics", {"networks": [network]}),
            ("POST", f"/vms/{vm}?action=update", {"alias": "other"}))


def _detach(world: World) -> tuple[Request, Request]:
    volume = world.volume()
    world.ok("POST", f"/volumes/{volume}?action=attach_network", ADDRESS)
    detach = {"network_uuid": ADDRESS["network_uuid"]}
    return (("POST", f"/volumes/{volume}?action=detach_network", detach),
            ("POST", f"/volumes/{volume}?action=attach_network", ADDRESS))


def _attach(world: World) -> tuple[Request, Request]:
    volume = world.volume()
    return (("POST", f"/volumes/{volume}?action=attach_network", ADDRESS),
            ("POST", f"/volumes/{volume}?action=detach_network",
             {"network_uuid": ADDRESS["network_uuid"]}))


def _server_action(action: str, other: str) -> Callable[[World], tuple[Request, Request]]:
    def make(world: World) -> tuple[Request, Request]:
        server = world.server()
        return (("POST", f"/servers/{server}?action={action}", {}),
                ("POST", f"/servers/{server}?action={other}", {}))
    return make


def _delete(world: World) -> tuple[Request, Request]:
    vm, other = world.vm(), world.vm()
    return ("DELETE", f"/vms/{vm}", None), ("DELETE", f"/vms/{other}", None)


def _stopped(world: World, vm: str) -> None:
    world.ok("POST", f"/vms/{vm}?action=stop")


def _quarantined(world: World, vm: str) -> None:
    world.ok("POST", f"/vms/{vm}?action=quarantine", {"reason": "look"})


# (method, route path) -> cases: (name, what each makes: the request, and another one)
COMMANDS: dict[tuple[str, str], dict[str, Callable[[World], tuple[Request, Request]]]] = {
    ("POST", "/vms"): {"CreateVm": lambda w: (("POST", "/vms", vm_body()),
                                              ("POST", "/vms", vm_body(ram=512)))},
    ("POST", "/vms/{vm_uuid}"): {
        "start": _vm_action("start", "reboot", setup=_stopped),
        "stop": _vm_action("stop", "reboot"),
        "kill": _vm_action("kill", "stop"),
        "reboot": _vm_action("reboot", "stop"),
        "update": lambda w: (lambda vm: (
            ("POST", f"/vms/{vm}?action=update", {"alias": "one"}),
            ("POST", f"/vms/{vm}?action=update", {"alias": "two"})))(w.vm()),
        "add_nics": _add_nics,
        "remove_nics": _nic_vm,
        "quarantine": lambda w: (lambda vm: (
            ("POST", f"/vms/{vm}?action=quarantine", {"reason": "look"}),
            ("POST", f"/vms/{vm}?action=quarantine", {"reason": "other"})))(w.vm()),
        "release": _vm_action("release", "stop", setup=_quarantined),
    },
    ("DELETE", "/vms/{vm_uuid}"): {"DeleteVm": _delete},
    ("POST", "/volumes"): {"CreateVolume": lambda w: (("POST", "/volumes", {"name": "v1"}),
                                                      ("POST", "/volumes", {"name": "v2"}))},
    ("POST", "/volumes/{volume_uuid}"): {"attach_network": _attach, "detach_network": _detach},
    ("POST", "/networks"): {"CreateNetwork": lambda w: (
        ("POST", "/networks", NET), ("POST", "/networks", {**NET, "name": "other"}))},
    ("POST", "/servers"): {"CreateServer": lambda w: (
        ("POST", "/servers", SERVER), ("POST", "/servers", {**SERVER, "hostname": "cn-2"}))},
    ("POST", "/servers/{server_uuid}"): {"server reboot": _server_action("reboot", "remove"),
                                         "server remove": _server_action("remove", "reboot")},
}
CASES = {name: make for cases in COMMANDS.values() for name, make in cases.items()}


def _writing_routes(settings: Settings) -> set[tuple[str, str]]:
    found = set()
    for router in [*api_routers(settings), *console.ROUTERS]:
        for route in router.routes:
            for method in getattr(route, "methods", None) or ():
                if method in ("POST", "PUT", "PATCH", "DELETE"):
                    found.add((method, route.path))
    return found


def test_every_route_that_writes_is_a_command_checked_here_or_said_not_to_be(
        settings) -> None:
    unlisted = {route for route in _writing_routes(settings) - set(COMMANDS) - NOT_COMMANDS
                if not route[1].startswith("/sim/")}  # the simulated world's controls
    assert not unlisted, f"list each in COMMANDS or NOT_COMMANDS: {sorted(unlisted)}"


def _send(world: World, request: Request, key: str):
    method, url, body = request
    return world.http.request(method, url, json=body, headers={"Idempotency-Key": key})


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_a_repeat_with_the_same_key_is_answered_as_the_first_and_appends_nothing(
        paused, make) -> None:
    world = World(paused)
    request, _ = make(world)
    first = _send(world, request, "k-1")
    assert first.status_code < 300, first.text
    head = paused.services.commands.head_position()
    again = _send(world, request, "k-1")
    assert again.status_code == first.status_code, again.text
    assert paused.services.commands.head_position() == head
    for field in ("uuid", "vm_uuid", "job_uuid"):
        if isinstance(first.json(), dict) and field in first.json():
            assert again.json()[field] == first.json()[field], (field, again.json())


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_the_key_of_another_request_is_refused_and_appends_nothing(paused, make) -> None:
    world = World(paused)
    request, other = make(world)
    first = _send(world, request, "k-2")
    assert first.status_code < 300, first.text
    head = paused.services.commands.head_position()
    assert_error(_send(world, other, "k-2"), 422, "IdempotencyKeyReused")
    assert paused.services.commands.head_position() == head
