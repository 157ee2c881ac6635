"""Creates of one alias raced by several processes on PostgreSQL (domain/alias_hold.py):
exactly one is accepted, the others are refused ``DuplicateAliasError``, and the log records
one VM holding it; destroyed, its alias is taken again by exactly one of the next race."""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from domain.alias_hold import AliasHold, DuplicateAliasError, hold_id
from domain.states import Action
from domain.vm import Vm, make_cause
from service.commands.application import VmSpec
from service.commands.versioning import NEWEST
from service.container import Services
from service.settings import Settings

# processes racing on PostgreSQL (.ci/slow.sh), left out of the default run
pytestmark = pytest.mark.slow

OWNER = "00000000-0000-4000-8000-0000000000cc"
PROCESSES = 6
ALIASES = ("race-1", "race-2", "race-3", "race-4")


@pytest.fixture
def postgres_database(postgres_url: str) -> str:
    from tests.conftest import _empty_schema

    _empty_schema(postgres_url)
    return postgres_url


def _creator(database_url: str, alias: str, seed: int, start_at: float
             ) -> tuple[str | None, int]:
    """One racing process: one CreateVm of ``alias`` at ``start_at``. Returns the VM's uuid
    (None: refused as a duplicate) and how many of its saves lost a race."""
    services = Services.build(Settings(database_url=database_url, postgres_pool_size=2,
                                       unique_aliases=True),
                              register_fleet=False)
    conflicts: list[int] = []
    services.commands.on_conflict = lambda: conflicts.append(1)
    try:
        while time.time() < start_at:  # every process starts at the same moment
            time.sleep(0.0005)
        try:
            created = services.commands.create_vm(
                VmSpec(owner_uuid=OWNER, brand="joyent", ram=64, alias=alias),
                cause=make_cause(f"p{seed}"))
        except DuplicateAliasError:
            return None, len(conflicts)
        return created.vm_uuid, len(conflicts)
    finally:
        services.close()


def _race(pool: ProcessPoolExecutor, database_url: str, alias: str) -> tuple[list[str], int]:
    start_at = time.time() + 2
    runs = [pool.submit(_creator, database_url, alias, seed, start_at)
            for seed in range(PROCESSES)]
    results = [run.result() for run in runs]
    return [vm for vm, _ in results if vm is not None], sum(n for _, n in results)


@pytest.mark.postgres
def test_concurrent_creates_of_one_alias_accept_exactly_one(postgres_database) -> None:
    services = Services.build(Settings(database_url=postgres_database, unique_aliases=True))
    context = multiprocessing.get_context("spawn")  # no pool or thread crosses a fork
    raced = 0  # saves that lost a race on the alias's hold, all races together
    try:
        with ProcessPoolExecutor(PROCESSES, mp_context=context) as pool:
            for alias in ALIASES:
                accepted, conflicts = _race(pool, postgres_database, alias)
                raced += conflicts
                assert len(accepted) == 1, (alias, accepted)
                hold = services.commands.load_aggregate(AliasHold, hold_id(OWNER, alias))
                assert hold.holders == accepted
            # the first alias's VM destroyed (its provision canceled, its destroy job run
            # here), the alias is free for exactly one of the next race
            [first] = services.commands.load_aggregate(
                AliasHold, hold_id(OWNER, ALIASES[0])).holders
            services.commands.request_action(first, Action.DESTROY, behaviour=NEWEST,
                                             cause=make_cause("test"))
            while services.worker.run_vm(first):
                pass
            assert services.commands.load(first).state == "destroyed"
            assert services.commands.load_aggregate(
                AliasHold, hold_id(OWNER, ALIASES[0])).holders == []
            again, conflicts = _race(pool, postgres_database, ALIASES[0])
            assert len(again) == 1 and again != [first]
            assert raced + conflicts > 0, "the processes never raced"

        events = [services.app.mapper.to_domain_event(n)
                  for n in services.app.recorder.select_notifications(0, 1_000_000)]
        created = [e for e in events if isinstance(e, Vm.Created)]
        assert len(created) == len(ALIASES) + 1  # no refused create left a VM in the log
        reserved = [e for e in events if isinstance(e, AliasHold.AliasReserved)]
        assert sorted(str(e.vm_uuid) for e in reserved) == sorted(
            str(e.originator_id) for e in created)
    finally:
        services.close()
