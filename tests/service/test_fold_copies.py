"""``copy_of_fold`` (service/commands/aggregate_cache.py): the copy a command decides on when
it loads a cached fold. It must be what ``deepcopy`` gives, sharing nothing changeable with
the cached aggregate, for every kind of aggregate and state."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest

from domain.network import Network
from domain.server import Server
from domain.states import Action, VmState
from service.commands.aggregate_cache import copy_of_fold
from tests.builders import cause, new_vm, queue, vm_in


def _vms() -> list[Any]:
    rich = vm_in(VmState.RUNNING, alias="web", tags={"role": ["web", {"tier": 1}]},
                 customer_metadata={"user-script": "#!/bin/sh"},
                 volumes=[{"volume_uuid": str(uuid.uuid4()), "mountpoint": "/data"}])
    queue(rich, Action.UPDATE, tags={"a": "b"})
    rich.collect_events()
    return [rich, *(vm_in(state) for state in VmState)]


def _server() -> Server:
    server = Server.register(server_uuid=uuid.uuid4(), hostname="cn1", boot_id="b1",
                             ram_mib=4096, cpus=4, cause=cause())
    server.claim(str(uuid.uuid4()), ram_mib=1024, cpus=1, cause=cause())
    server.collect_events()
    return server


def _network() -> Network:
    network = Network.create(network_uuid=uuid.uuid4(), name="external",
                             subnet="10.0.0.0/24", provision_start_ip="10.0.0.10",
                             provision_end_ip="10.0.0.20", gateway="10.0.0.1", cause=cause())
    network.claim("10.0.0.10", vm_uuid=str(uuid.uuid4()), mac="90:b8:d0:00:00:01",
                  cause=cause())
    network.collect_events()
    return network


def _containers(value: Any) -> list[Any]:
    """Every dict and list reachable from ``value`` (an aggregate's state)."""
    found: list[Any] = []
    stack = [vars(value)] if hasattr(value, "__dict__") else [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (dict, list, set)):
            found.append(item)
            stack.extend(item.values() if isinstance(item, dict) else item)
    return found


@pytest.mark.parametrize("aggregate", [*_vms(), _server(), _network()],
                         ids=lambda a: f"{type(a).__name__}-{getattr(a, 'state', '')}")
def test_the_copy_equals_deepcopys_and_shares_no_container(aggregate):
    copied = copy_of_fold(aggregate)
    assert type(copied) is type(aggregate)
    assert vars(copied) == vars(copy.deepcopy(aggregate))
    originals = {id(c) for c in _containers(aggregate)}
    assert originals and not originals & {id(c) for c in _containers(copied)}


def test_changing_the_copy_leaves_the_cached_fold_as_it_was():
    vm = _vms()[0]
    before = copy.deepcopy(vars(vm))
    copied = copy_of_fold(vm)
    copied.tags["role"][1]["tier"] = 2
    queue(copied, Action.STOP)
    assert vars(vm) == before


def test_a_value_of_another_kind_is_deep_copied():
    vm = vm_in(VmState.RUNNING)
    vm.seen = {"a"}  # not a type the copy may share
    copied = copy_of_fold(vm)
    assert copied.seen == {"a"} and copied.seen is not vm.seen


def test_an_aggregate_with_pending_events_is_copied_whole_by_deepcopy(monkeypatch):
    vm = new_vm(tags={"k": "v"})
    deep: list[Any] = []
    real = copy.deepcopy
    monkeypatch.setattr("service.commands.aggregate_cache.deepcopy",
                        lambda value, *rest: deep.append(value) or real(value, *rest))
    copied = copy_of_fold(vm)
    assert deep == [vm]
    assert [type(e) for e in copied.pending_events] == [type(e) for e in vm.pending_events]
    assert vars(copied)["tags"] == {"k": "v"} and copied.tags is not vm.tags
