"""Address allocation raced by 8 processes against one small network on PostgreSQL
(service/commands/networks.py): no address is ever held twice, every acknowledged NIC is in
the log, and the network's free count in its read model equals a fresh fold of its stream."""

from __future__ import annotations

import multiprocessing
import random
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

import pytest

from domain.errors import ValidationError
from domain.network import Network, range_counts
from domain.vm import Vm, make_cause
from service.commands.application import VmSpec
from service.commands.networks import NicRequest
from service.commands.nic_actions import change_nics
from service.commands.versioning import NEWEST
from service.container import Services
from service.settings import Settings

OWNER = "00000000-0000-4000-8000-0000000000bb"
PROCESSES = 8
ATTEMPTS = 6  # per process: 48 asks for the 10 addresses, with releases in between
RANGE = ("10.9.0.2", "10.9.0.11")


@pytest.fixture
def postgres_database(postgres_url: str) -> str:
    from tests.conftest import _empty_schema

    _empty_schema(postgres_url)
    return postgres_url


def _allocator(database_url: str, network_uuid: str, seed: int, start_at: float
               ) -> tuple[list[tuple[str, str, str]], int]:
    """One racing process: create VMs with a NIC on the network, and remove some NICs again
    (each removal's job run here).
    Returns what was acknowledged, ``(what, vm_uuid, ip)``, and how many of its saves lost a
    race (the change loop's conflicts)."""
    services = Services.build(Settings(database_url=database_url, postgres_pool_size=4))
    conflicts: list[int] = []
    counted = services.commands.on_conflict
    services.commands.on_conflict = lambda: (conflicts.append(1), counted())[-1]
    rng = random.Random(seed)
    acked: list[tuple[str, str, str]] = []
    try:
        while time.time() < start_at:  # every process starts at the same moment
            time.sleep(0.001)
        for _ in range(ATTEMPTS):
            try:
                created = services.commands.create_vm(
                    VmSpec(owner_uuid=OWNER, brand="joyent", ram=128,
                           networks=(NicRequest(network_uuid),)), cause=make_cause(f"p{seed}"))
            except ValidationError:
                continue  # the network was full: refused, nothing stored
            vm = services.commands.load(created.vm_uuid)
            acked.append(("added", created.vm_uuid, vm.nic_list[0]["ip"]))
            if rng.random() < 0.5:
                change_nics(services.commands, created.vm_uuid, behaviour=NEWEST,
                            cause=make_cause(f"p{seed}"), remove=[vm.nic_list[0]["mac"]])
                # the removal, and the address's release, is recorded by its job: run the
                # VM's provision, then it
                while services.worker.run_vm(created.vm_uuid):
                    pass
                assert services.commands.load(created.vm_uuid).nic_list == []
                acked.append(("removed", created.vm_uuid, vm.nic_list[0]["ip"]))
    finally:
        services.close()
    return acked, len(conflicts)


@pytest.mark.postgres
@pytest.mark.slow
def test_eight_processes_never_get_one_address_twice(postgres_database) -> None:
    services = Services.build(Settings(database_url=postgres_database))
    try:
        network, _ = services.commands.create_network(
            name="small", subnet="10.9.0.0/28", provision_start_ip=RANGE[0],
            provision_end_ip=RANGE[1], gateway="10.9.0.1", cause=make_cause())
        network_uuid = str(network.id)
        start_at = time.time() + 3
        context = multiprocessing.get_context("spawn")  # no pool or thread crosses a fork
        with ProcessPoolExecutor(PROCESSES, mp_context=context) as pool:
            runs = [pool.submit(_allocator, postgres_database, network_uuid, seed, start_at)
                    for seed in range(PROCESSES)]
            results = [run.result() for run in runs]
        acked = [entry for entries, _ in results for entry in entries]
        assert sum(conflicts for _, conflicts in results) > 0, "the processes never raced"

        events = [services.app.mapper.to_domain_event(n)
                  for n in services.app.recorder.select_notifications(0, 10_000_000)]
        held: dict[str, str] = {}
        for event in events:  # in log order: an address is claimed only while it is free
            if isinstance(event, Network.AddressClaimed):
                assert event.ip not in held, f"{event.ip} claimed by {event.vm_uuid} while " \
                                             f"{held.get(event.ip)} held it"
                held[event.ip] = event.vm_uuid
            elif isinstance(event, Network.AddressReleased):
                assert held.pop(event.ip) == event.vm_uuid

        added = [(vm, ip) for what, vm, ip in acked if what == "added"]
        assert len(added) > 10, "the race must exhaust the range and reuse released addresses"
        nics_in_log = {(str(e.originator_id), nic["ip"]) for e in events
                       if isinstance(e, Vm.NicsAdded) for nic in e.nics}
        assert set(added) <= nics_in_log  # every acknowledged NIC is in the log
        assert len(nics_in_log) == len(added)  # and none that was not acknowledged
        removed = Counter((vm, ip) for what, vm, ip in acked if what == "removed")
        still = {(vm, ip) for vm, ip in added if not removed[(vm, ip)]}
        assert {(vm, ip) for ip, vm in held.items()} == still

        fresh = services.commands.load_network(network_uuid)
        assert fresh.claims == held
        services.projections.catch_up()
        view = services.networks.get(network_uuid)
        in_use, _outside = range_counts(fresh.provision_start_ip, fresh.provision_end_ip,
                                        fresh.claims)
        assert view["addresses_free"] == fresh.size - in_use == 10 - len(held)
        assert view["addresses_in_use"] == len(fresh.claims)
    finally:
        services.close()
