"""Real races against PostgreSQL: processes and threads writing the same streams at once.

These prove the concurrency claims of api.md ("Concurrency and idempotency") and design.md:
no lost update, no 5xx, read models equal to a fresh fold, at most one running job per VM, and
a projection that applies every event exactly once while 16 writers append.
"""

from __future__ import annotations

import random
import threading
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor

import httpx
import pytest

from domain.states import Action
from domain.vm import Vm, make_cause
from projections.vm_view import render_vm
from service.commands.application import VmSpec
from service.container import Services
from service.settings import Settings
from service.commands.versioning import NEWEST
from tests.integration.processes import deployment

OWNER = "00000000-0000-4000-8000-0000000000aa"
CLIENTS = 8
COMMANDS_PER_CLIENT = 40


@pytest.fixture
def postgres_database(postgres_url: str) -> str:
    from tests.conftest import _empty_schema

    _empty_schema(postgres_url)
    return postgres_url


def _client(base_url: str, vm_uuids: list[str], seed: int) -> list[tuple[int, str | None, str]]:
    """One racing client process: conflicting commands on a handful of VMs.

    Returns (status, job uuid, what was asked) for each command.
    """
    rng = random.Random(seed)
    results = []
    with httpx.Client(base_url=base_url, timeout=60) as http:
        for n in range(COMMANDS_PER_CLIENT):
            vm_uuid = rng.choice(vm_uuids)
            if rng.random() < 0.6:
                # a unique alias each time, so no two commands are the same job
                alias = f"c{seed}-{n}"
                response = http.post(f"/vms/{vm_uuid}", params={"action": "update"},
                                     json={"alias": alias}, headers={"Accept-Version": "~2"})
                asked = f"update:{alias}"
            else:
                action = rng.choice(["start", "stop", "reboot"])
                response = http.post(f"/vms/{vm_uuid}", params={"action": action},
                                     headers={"Accept-Version": "~2"})
                asked = action
            body = response.json()
            job_uuid = body.get("job_uuid") if response.status_code == 202 else None
            results.append((response.status_code, job_uuid or body.get("message"), asked))
    return results


def _fold_check(services: Services, vm_uuids: list[str]) -> None:
    for vm_uuid in vm_uuids:
        assert services.vms.get(vm_uuid) == render_vm(services.commands.load(vm_uuid))


def _events(services: Services) -> list:
    notifications = services.app.recorder.select_notifications(0, 10_000_000)
    return [services.app.mapper.to_domain_event(n) for n in notifications]


def _assert_one_running_job_at_a_time(events: list) -> None:
    running: dict[object, str | None] = {}
    for event in events:
        stream = event.originator_id
        if isinstance(event, Vm.JobStarted):
            holder = running.get(stream)
            assert holder in (None, event.job_uuid), (
                f"VM {stream}: job {event.job_uuid} started while {holder} was running")
            running[stream] = event.job_uuid
        elif isinstance(event, Vm.JobSucceeded | Vm.JobFailed):
            running[stream] = None


@pytest.mark.postgres
@pytest.mark.slow
def test_racing_processes_lose_no_update_and_never_answer_5xx(postgres_database, tmp_path):
    settings = Settings(database_url=postgres_database, sim_servers=8, embedded_runners=False)
    services = Services.build(settings)
    try:
        vm_uuids = [
            services.commands.create_vm(
                VmSpec(owner_uuid=OWNER, brand="bhyve", ram=512), cause=make_cause()
            ).vm_uuid
            for _ in range(4)
        ]
        with deployment(postgres_database, str(tmp_path)) as base_url:
            with ProcessPoolExecutor(CLIENTS) as pool:
                futures = [pool.submit(_client, base_url, vm_uuids, seed)
                           for seed in range(CLIENTS)]
                results = [r for f in futures for r in f.result()]
            with httpx.Client(base_url=base_url, timeout=60) as http:
                # every job ends; then the read models have caught up with the whole log
                for status, job_uuid, _ in results:
                    if status == 202:
                        job = http.get(f"/jobs/{job_uuid}/wait", params={"timeout": 60}).json()
                        assert job["execution"] in ("succeeded", "failed", "canceled"), job
                http.get("/vms")  # read-your-writes: waits for vm_view to reach the head
            statuses = Counter(status for status, _, _ in results)
            assert not [s for s in statuses if s >= 500], (
                statuses, Counter(m for s, m, _ in results if s >= 500))
            accepted = [job for status, job, _ in results if status == 202]
            assert len(accepted) > CLIENTS * COMMANDS_PER_CLIENT // 2, statuses

            events = _events(services)
            queued = Counter(e.job_uuid for e in events if isinstance(e, Vm.JobQueued))
            # acknowledged commands are each in the log exactly once (updates are all distinct)
            updates = {job for status, job, asked in results
                       if status == 202 and asked.startswith("update:")}
            assert all(queued[job] == 1 for job in updates)
            assert set(accepted) <= set(queued)
            aliases = {e.changes["alias"] for e in events
                       if isinstance(e, Vm.MetadataUpdated) and "alias" in e.changes}
            asked_aliases = {asked.removeprefix("update:") for status, _, asked in results
                             if status == 202 and asked.startswith("update:")}
            assert asked_aliases <= aliases, "an acknowledged update was lost"
            _assert_one_running_job_at_a_time(events)
            # two work processes never run the same job twice: no lease expires here, so
            # every job (the 4 provisions and each accepted action) was started exactly once
            started = Counter(e.job_uuid for e in events if isinstance(e, Vm.JobStarted))
            assert set(started) == set(queued), set(queued) ^ set(started)
            assert all(count == 1 for count in started.values()), {
                job: count for job, count in started.items() if count > 1}
            _fold_check(services, vm_uuids)
    finally:
        services.close()


class EventLedger:
    """A test read model: one row per (stream, version) applied, with its position.

    The primary key makes a second application of an event fail the batch."""

    name = "event_ledger"
    tables = ("event_ledger",)

    def create_statements(self, db):
        return ["CREATE TABLE IF NOT EXISTS event_ledger (stream TEXT NOT NULL, "
                "version INTEGER NOT NULL, position BIGINT NOT NULL, "
                "PRIMARY KEY (stream, version))"]

    def apply(self, tx, events):
        for position, event in events:
            tx.execute("INSERT INTO event_ledger (stream, version, position) VALUES (?, ?, ?)",
                       (str(event.originator_id), event.originator_version, position))


@pytest.mark.postgres
@pytest.mark.slow
def test_a_projection_tailing_16_writers_applies_every_event_once_in_stream_order(
        postgres_database):
    from projections.runner import ProjectionRunner

    services = Services.build(Settings(database_url=postgres_database,
                                       postgres_pool_size=20, postgres_max_overflow=10))
    runner = ProjectionRunner(services.db, services.app.recorder, services.app.mapper,
                              [EventLedger()], batch_size=50)
    runner.create_tables()
    stop = threading.Event()
    tail = threading.Thread(target=runner.run_forever, args=(stop, 0.001))
    tail.start()
    try:
        vm_uuids = [services.commands.create_vm(
            VmSpec(owner_uuid=OWNER, brand="bhyve", ram=256), cause=make_cause()).vm_uuid
            for _ in range(6)]
        barrier = threading.Barrier(16)
        # Four writers' processes (each its own pool and group committer): within one, the
        # change loop takes a stream's writers in turn, so the conflicts are between them.
        writing = [services] + [Services.build(Settings(
            database_url=postgres_database, postgres_pool_size=5, postgres_max_overflow=2))
            for _ in range(3)]

        def writer(seed: int) -> None:
            rng = random.Random(seed)
            barrier.wait()
            for n in range(40):
                # conflicting appends on few streams: gaps in the sequence from rollbacks
                writing[seed % 4].commands.request_action(
                    rng.choice(vm_uuids), Action.UPDATE, behaviour=NEWEST,
                    cause=make_cause(f"writer-{seed}"), args={"alias": f"w{seed}-{n}"})

        writers = [threading.Thread(target=writer, args=(seed,)) for seed in range(16)]
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join()
        for other in writing[1:]:
            other.close()
        head = runner.head()
        assert runner.wait_for(head, ["event_ledger"], timeout=60)
    finally:
        stop.set()
        runner.wake()
        tail.join()
    try:
        with services.db.transaction(commit=False) as tx:
            tx.execute("SELECT stream, version, position FROM event_ledger ORDER BY position")
            rows = tx.fetchall()
        stored = services.app.recorder.select_notifications(0, 1_000_000)
        assert len(rows) == len(stored)  # every event once: none skipped, none doubled
        per_stream: dict[str, list[int]] = defaultdict(list)
        for row in rows:
            per_stream[row["stream"]].append(row["version"])
        for stream, versions in per_stream.items():
            assert versions == list(range(1, len(versions) + 1)), stream
        assert max(n.id for n in stored) > len(stored), "expected sequence gaps from conflicts"
    finally:
        services.close()
